//! A fenced store: the protected resource of the fencing example. A Redis
//! hash updated only through a script that turns away a write whose fencing
//! token is lower than the highest one it has accepted.
//!
//! Shared with the integration tests, which check that it rejects a late
//! write and that skipping it loses an update.

use redis::aio::MultiplexedConnection;
use redis::{RedisResult, Script};

/// Accept the write only if its token is not below the last accepted one.
const FENCED_WRITE: &str = r"
local last = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
if tonumber(ARGV[1]) < last then
  return 0
end
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'value', ARGV[2])
return 1
";

/// A value guarded by fencing tokens.
pub struct FencedStore {
    conn: MultiplexedConnection,
    key: String,
    script: Script,
}

impl FencedStore {
    pub fn new(conn: MultiplexedConnection, key: &str) -> Self {
        FencedStore {
            conn,
            key: key.to_string(),
            script: Script::new(FENCED_WRITE),
        }
    }

    /// Writes `value` if `token` is not older than the newest accepted;
    /// returns whether it was accepted.
    pub async fn write(&mut self, token: u64, value: &str) -> RedisResult<bool> {
        let accepted: i64 = self
            .script
            .key(&self.key)
            .arg(token)
            .arg(value)
            .invoke_async(&mut self.conn)
            .await?;
        Ok(accepted == 1)
    }

    /// Writes `value` without looking at tokens: what a resource that
    /// ignores fencing does.
    pub async fn write_unfenced(&mut self, value: &str) -> RedisResult<()> {
        redis::cmd("HSET")
            .arg(&self.key)
            .arg("value")
            .arg(value)
            .query_async(&mut self.conn)
            .await
    }

    pub async fn read(&mut self) -> RedisResult<String> {
        let value: Option<String> = redis::cmd("HGET")
            .arg(&self.key)
            .arg("value")
            .query_async(&mut self.conn)
            .await?;
        Ok(value.unwrap_or_default())
    }
}

/// The lease's fencing token: its Locker must be built with
/// `.fencing(true)`, else the lease carries none.
fn fencing_token(lease: &redlease::Lease) -> Result<u64, Box<dyn std::error::Error>> {
    lease
        .fencing_token()
        .ok_or_else(|| "the Locker draws no fencing tokens: build it with .fencing(true)".into())
}

/// The classic failure: client A takes the lock, reads, then stalls (a GC
/// pause, a swap storm) past its lease; B takes the expired lock, reads,
/// appends its entry and writes; A wakes and writes what it computed from
/// its stale read. With fencing, A's write carries the older token and is
/// turned away; without, B's entry is lost. Returns the final value and
/// whether A's late write was accepted. `locker` must have fencing on.
pub async fn late_writer(
    locker: &redlease::Locker,
    store: &mut FencedStore,
    fenced: bool,
    stall: std::time::Duration,
) -> Result<(String, bool), Box<dyn std::error::Error>> {
    let resource = "fenced-ledger";
    let lease_a = locker.lock(resource).await?;
    let token_a = fencing_token(&lease_a)?;
    let seen_by_a = store.read().await?;

    // A stalls past its lease; meanwhile B gets the lock.
    tokio::time::sleep(stall).await;
    let lease_b = locker.lock(resource).await?;
    let token_b = fencing_token(&lease_b)?;
    assert!(token_b > token_a);
    let seen_by_b = store.read().await?;
    let written_by_b = format!("{seen_by_b}B");
    if fenced {
        store.write(token_b, &written_by_b).await?;
    } else {
        store.write_unfenced(&written_by_b).await?;
    }
    lease_b.release().await?;

    // A wakes up, unaware, and writes what it computed before the stall.
    let written_by_a = format!("{seen_by_a}A");
    let accepted = if fenced {
        store.write(token_a, &written_by_a).await?
    } else {
        store.write_unfenced(&written_by_a).await?;
        true
    };
    // A's lease is long gone: release says so.
    let _ = lease_a.release().await;
    Ok((store.read().await?, accepted))
}
