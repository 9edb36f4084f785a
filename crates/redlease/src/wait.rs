//! Waiting for a busy lock: retry attempts with jittered delays, never
//! sleeping past the holder's expiry or the wait deadline.

use std::future::Future;
use std::time::Instant;

use crate::backoff::RetryPolicy;
use crate::Error;

/// Runs `attempt` until it succeeds, fails for good (bad input), or the
/// policy's attempts or deadline run out. Out of attempts: the last error
/// as it is. Past the deadline: [`Error::WaitTimeout`] wrapping it.
pub(crate) async fn retry<T, F, Fut>(
    resource: &str,
    policy: &RetryPolicy,
    mut attempt: F,
) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    let start = Instant::now();
    let deadline = policy.wait.map(|wait| start + wait);
    let mut attempts: u32 = 0;
    loop {
        attempts = attempts.saturating_add(1);
        let last = match attempt().await {
            Ok(value) => return Ok(value),
            Err(e) if !e.is_retryable() => return Err(e),
            Err(e) => e,
        };
        if policy.attempts.is_some_and(|max| attempts >= max) {
            return Err(last);
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            return Err(Error::WaitTimeout {
                resource: resource.to_string(),
                waited: now - start,
                attempts,
                last: Box::new(last),
            });
        }
        let delay =
            policy.delay_before_next(rand::random::<f64>(), last.expires_in(), now, deadline);
        tracing::debug!(resource, attempts, ?delay, error = %last, "lock busy, retrying");
        tokio::time::sleep(delay).await;
    }
}
