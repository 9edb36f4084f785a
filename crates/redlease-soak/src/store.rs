//! The protected resources, on a data Redis that is never faulted: per lock
//! a plain counter (read, sleep, write: lost if two holders overlap) and a
//! fenced store that accepts a write only with a token above the last
//! accepted one.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::Script;

use crate::setup;

/// Every data-Redis call of the workload is bounded; the data Redis is
/// local and never faulted (`--loss` spares it too), so this only fires
/// if the machine stalls badly.
const DATA_TIMEOUT: Duration = Duration::from_secs(2);

/// Accept `(token, value)` only if the token is above the last accepted
/// one. Tokens stay below 2^53, exact in Lua's numbers.
const FENCED_WRITE: &str = r"
local last = tonumber(redis.call('HGET', KEYS[1], 'token') or '0')
if tonumber(ARGV[1]) <= last then
  return 0
end
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'value', ARGV[2])
return 1
";

pub fn counter_key(lock: usize) -> String {
    format!("soak:counter:{lock}")
}

pub fn fenced_key(lock: usize) -> String {
    format!("soak:fenced:{lock}")
}

/// One client's connection to the data Redis.
pub struct Store {
    conn: MultiplexedConnection,
    fenced: Script,
}

async fn bounded<T>(
    request: impl std::future::Future<Output = redis::RedisResult<T>>,
) -> Result<T, String> {
    match tokio::time::timeout(DATA_TIMEOUT, request).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no reply within {DATA_TIMEOUT:?}")),
    }
}

impl Store {
    /// Connects, retried within [`setup::DEADLINE`] (see [`setup`]).
    pub async fn connect(url: &str) -> Result<Store, String> {
        let per_try = setup::CONNECT_TIMEOUT + DATA_TIMEOUT;
        let conn = setup::retried("connecting to the data Redis", per_try, || async {
            let mut conn = setup::connect(url).await?;
            // The workload's calls are bounded by DATA_TIMEOUT, not by
            // the connection's own reply timeout.
            conn.set_response_timeout(DATA_TIMEOUT);
            Ok::<_, redis::RedisError>(conn)
        })
        .await?;
        Ok(Store {
            conn,
            fenced: Script::new(FENCED_WRITE),
        })
    }

    /// The lock's counter (0 when never written).
    pub async fn read(&mut self, lock: usize) -> Result<u64, String> {
        let mut conn = self.conn.clone();
        let value: Option<u64> = bounded(
            redis::cmd("GET")
                .arg(counter_key(lock))
                .query_async(&mut conn),
        )
        .await?;
        Ok(value.unwrap_or(0))
    }

    /// Sets the lock's counter; `Ok` means acknowledged.
    pub async fn write(&mut self, lock: usize, value: u64) -> Result<(), String> {
        let mut conn = self.conn.clone();
        bounded(
            redis::cmd("SET")
                .arg(counter_key(lock))
                .arg(value)
                .query_async::<()>(&mut conn),
        )
        .await
    }

    /// Writes to the fenced store; `Ok(false)` when turned away.
    pub async fn fenced_write(
        &mut self,
        lock: usize,
        token: u64,
        value: &str,
    ) -> Result<bool, String> {
        let mut conn = self.conn.clone();
        let mut call = self.fenced.prepare_invoke();
        call.key(fenced_key(lock)).arg(token).arg(value);
        let accepted: i64 = bounded(call.invoke_async(&mut conn)).await?;
        Ok(accepted == 1)
    }

    /// The final value of every counter (each read retried within
    /// [`setup::DEADLINE`]).
    pub async fn counters(&mut self, locks: usize) -> Result<Vec<Option<u64>>, String> {
        let mut out = Vec::with_capacity(locks);
        for lock in 0..locks {
            let what = format!("reading counter {lock}");
            let value: Option<u64> = setup::retried(&what, DATA_TIMEOUT, || {
                let mut conn = self.conn.clone();
                async move {
                    redis::cmd("GET")
                        .arg(counter_key(lock))
                        .query_async(&mut conn)
                        .await
                }
            })
            .await?;
            out.push(value);
        }
        Ok(out)
    }
}
