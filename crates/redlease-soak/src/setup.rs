//! The soak's own calls to its servers (not the library's): connecting to
//! the data Redis, `INFO` of the nodes before the clients start, the
//! end-of-run `SCAN` for leftover keys and the counters' final values.
//!
//! Each is bounded and retried: its connection has its own connect and
//! response timeouts (not redis-rs's defaults, 1 s and 500 ms), and a
//! failed or timed-out attempt is tried again, with a pause, until
//! [`DEADLINE`]. Under real packet loss (`--loss`) a lost SYN costs 1 s and
//! another 2 s if its retransmission is lost too, a lost segment 200 ms or
//! more, doubling: one slow round trip must not abort a run, while a
//! server that is really gone still ends it within the deadline, with the
//! last error.

use std::future::Future;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::AsyncConnectionConfig;

/// One connection attempt: room for one SYN retransmission (1 s).
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(2500);
/// One request's reply: room for a few retransmissions (200 ms, 400 ms,
/// 800 ms, ...).
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one call is retried, all attempts together.
pub const DEADLINE: Duration = Duration::from_secs(20);
/// The pause between attempts.
const PAUSE: Duration = Duration::from_millis(100);

/// A connection to `url` with the soak's own timeouts.
pub async fn connect(url: &str) -> redis::RedisResult<MultiplexedConnection> {
    let client = redis::Client::open(url)?;
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(RESPONSE_TIMEOUT));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

/// Runs `attempt` until it succeeds, each try bounded by `per_try`, for
/// [`DEADLINE`] at most; then the last error, saying what was tried and
/// how often. Only for calls that may be repeated (reads, connections,
/// idempotent writes).
pub async fn retried<T, E, F, Fut>(
    what: &str,
    per_try: Duration,
    mut attempt: F,
) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: std::fmt::Display,
{
    // Tokio's clock: the same as the system's, but paused in the tests.
    let start = tokio::time::Instant::now();
    let mut tries: u32 = 0;
    loop {
        tries += 1;
        let error = match tokio::time::timeout(per_try, attempt()).await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {per_try:?}"),
        };
        if start.elapsed() + PAUSE >= DEADLINE {
            return Err(format!(
                "{what}: {error} ({tries} tries in {:.1} s)",
                start.elapsed().as_secs_f64()
            ));
        }
        tokio::time::sleep(PAUSE).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test(start_paused = true)]
    async fn a_call_is_retried_until_it_answers() {
        let calls = AtomicU32::new(0);
        let got = retried("the call", Duration::from_secs(1), || async {
            match calls.fetch_add(1, Ordering::SeqCst) {
                0 => Err("refused"),
                1 => {
                    // Slower than one try may take: cut off, and tried again.
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    Ok(0)
                }
                n => Ok(n),
            }
        })
        .await;
        assert_eq!(got, Ok(2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_that_never_answers_ends_at_the_deadline_with_its_error() {
        let start = tokio::time::Instant::now();
        let got: Result<(), String> = retried("INFO of node 3", Duration::from_secs(2), || async {
            Err("reset")
        })
        .await;
        let e = got.unwrap_err();
        assert!(e.starts_with("INFO of node 3: reset ("), "{e}");
        let took = start.elapsed();
        assert!(took <= DEADLINE && took >= DEADLINE - PAUSE * 2, "{took:?}");
        let got: Result<(), String> = retried("SCAN", Duration::from_secs(2), || {
            std::future::pending::<Result<(), String>>()
        })
        .await;
        assert!(got.unwrap_err().contains("no answer within 2s"));
    }
}
