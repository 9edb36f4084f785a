//! Fencing tokens in action: a holder that stalls past its lease has its
//! late write turned away by the protected resource, where a resource that
//! ignores tokens loses the other holder's update.
//!
//! Nodes come from REDLEASE_NODES (comma-separated URLs), by default
//! redis://127.0.0.1:6379; the fenced store lives on the first node.
//!
//! It leaves nothing behind that does not expire: its two ledgers
//! (`redlease-fencing-example:ledger:*`) start empty with a one-minute TTL,
//! in case the example is interrupted, and are deleted at the end of each
//! round, also a failed one; the locks' keys expire with their TTL, and
//! their fencing counters after the fence expiry (10 minutes idle).
//!
//! ```text
//! cargo run --example fencing
//! ```

mod store;

use std::process::ExitCode;
use std::time::Duration;

use redlease::Locker;
use store::{late_writer, FencedStore};

/// How long a ledger outlives an interrupted example.
const LEDGER_TTL_MS: i64 = 60_000;

#[tokio::main]
async fn main() -> ExitCode {
    let urls: Vec<String> = std::env::var("REDLEASE_NODES")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_string())
        .split(',')
        .map(|u| u.trim().to_string())
        .filter(|u| !u.is_empty())
        .collect();
    match run(&urls).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            eprintln!(
                "(is Redis running at {}? set REDLEASE_NODES to point elsewhere)",
                urls.join(",")
            );
            ExitCode::FAILURE
        }
    }
}

async fn run(urls: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    // Fencing on, so each lease carries a token; a short TTL so the stall
    // below outlives the lease.
    let locker = Locker::builder(urls)
        .fencing(true)
        .ttl(Duration::from_millis(300))
        .key_prefix("redlease-fencing-example:")
        .build()?;
    let conn = redis::Client::open(urls[0].as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let stall = Duration::from_millis(500);

    for fenced in [true, false] {
        let key = format!(
            "redlease-fencing-example:ledger:{}",
            if fenced { "fenced" } else { "plain" }
        );
        let mut store = FencedStore::new(conn.clone(), &key);
        // An empty ledger (no fence, no value) that expires on its own: the
        // writes keep the TTL (HSET does not clear it).
        redis::pipe()
            .atomic()
            .del(&key)
            .hset(&key, "value", "")
            .pexpire(&key, LEDGER_TTL_MS)
            .query_async::<()>(&mut conn.clone())
            .await?;
        let outcome = late_writer(&locker, &mut store, fenced, stall).await;
        let deleted = redis::cmd("DEL")
            .arg(&key)
            .query_async::<()>(&mut conn.clone())
            .await;
        let (value, accepted) = outcome?;
        deleted?;
        println!(
            "{}: A's late write was {}; the ledger holds {value:?}{}",
            if fenced {
                "with fencing   "
            } else {
                "without fencing"
            },
            if accepted { "accepted" } else { "rejected" },
            if value.contains('B') {
                ""
            } else {
                " (B's update is lost)"
            },
        );
    }
    Ok(())
}
