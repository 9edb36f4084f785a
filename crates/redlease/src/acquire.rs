//! Taking a lock: the request builder and one attempt of the algorithm.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backoff::RetryPolicy;
use crate::error::{Held, Op};
use crate::fanout;
use crate::lease::{self, Lease, LeaseHandle};
use crate::locker::{Locker, Shared};
use crate::node::AcquireReply;
use crate::quorum::{Decision, Vote};
use crate::renew::LostReason;
use crate::token::Token;
use crate::validity::Timing;
use crate::{wait, Error};

/// A lock request from [`Locker::lock`] or [`Locker::try_lock`]: set
/// per-call options, then `.await` it.
///
/// ```no_run
/// use std::time::Duration;
/// # async fn demo(locker: redlease::Locker) -> Result<(), redlease::Error> {
/// let lease = locker.lock("report").ttl(Duration::from_secs(120)).await?;
/// # lease.release().await }
/// ```
#[must_use = "a lock request does nothing until it is awaited"]
pub struct Acquire<'a> {
    locker: &'a Locker,
    resource: String,
    ttl: Option<Duration>,
    retry: RetryPolicy,
    keep_alive: bool,
}

impl<'a> Acquire<'a> {
    pub(crate) fn new(locker: &'a Locker, resource: String, retry: RetryPolicy) -> Self {
        Acquire {
            locker,
            resource,
            ttl: None,
            retry,
            keep_alive: false,
        }
    }

    /// Use this TTL instead of the Locker's.
    ///
    /// ```no_run
    /// # async fn demo(locker: redlease::Locker) -> Result<(), redlease::Error> {
    /// let lease = locker.try_lock("x").ttl(std::time::Duration::from_millis(500)).await?;
    /// # lease.release().await }
    /// ```
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Keep retrying for at most `wait` (measured from the first attempt).
    /// The attempt limit of the policy still applies, so on a
    /// [`try_lock`](Locker::try_lock) this changes nothing.
    ///
    /// ```no_run
    /// # async fn demo(locker: redlease::Locker) -> Result<(), redlease::Error> {
    /// let lease = locker.lock("x").wait(std::time::Duration::from_secs(3)).await?;
    /// # lease.release().await }
    /// ```
    pub fn wait(mut self, wait: Duration) -> Self {
        self.retry.wait = Some(wait);
        self
    }

    /// Use this retry policy instead of the Locker's.
    ///
    /// ```no_run
    /// # async fn demo(locker: redlease::Locker) -> Result<(), redlease::Error> {
    /// let policy = redlease::RetryPolicy::new().attempts(5);
    /// let lease = locker.lock("x").retry(policy).await?;
    /// # lease.release().await }
    /// ```
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// Keep the lease alive: the Locker renews it in the background (every
    /// [`renew_fraction`](crate::LockerBuilder::renew_fraction) of the TTL,
    /// a third by default) until it is released or dropped. Watch
    /// [`Lease::lost`] or [`Lease::is_lost`] to learn at once if a renewal
    /// fails.
    ///
    /// ```no_run
    /// # async fn demo(locker: redlease::Locker) -> Result<(), redlease::Error> {
    /// let lease = locker.lock("long-job").keep_alive().await?;
    /// // ... work for as long as it takes, checking lease.is_lost() ...
    /// # lease.release().await }
    /// ```
    pub fn keep_alive(mut self) -> Self {
        self.keep_alive = true;
        self
    }

    /// Takes the lock (kept alive), runs `work` with a [`LeaseHandle`], and
    /// releases the lock afterwards, returning what `work` returned.
    ///
    /// If the lease is lost while `work` runs, `work`'s future is dropped at
    /// once (it does not go on unprotected) and the call returns
    /// [`Error::Lost`]. A release that finds the lock no longer ours also
    /// gives [`Error::Lost`]: the work may not have been protected to the end.
    ///
    /// ```no_run
    /// # async fn demo(locker: redlease::Locker) -> Result<(), redlease::Error> {
    /// let rows = locker
    ///     .lock("nightly-import")
    ///     .wait(std::time::Duration::from_secs(60))
    ///     .with(|lease| async move {
    ///         println!("holding {} for {:?}", lease.resource(), lease.remaining());
    ///         42 // ... the import ...
    ///     })
    ///     .await?;
    /// # let _ = rows; Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops `work` and releases the lock in the
    /// background.
    pub async fn with<F, Fut, T>(self, work: F) -> Result<T, Error>
    where
        F: FnOnce(LeaseHandle) -> Fut,
        Fut: Future<Output = T>,
    {
        let lease = self.keep_alive().await?;
        let outcome = tokio::select! {
            biased;
            why = lease.lost() => Err(why),
            out = work(lease.handle()) => Ok(out),
        };
        let resource = lease.resource().to_string();
        match outcome {
            Err(why) => Err(Error::Lost { resource, why }),
            Ok(out) => match lease.release().await {
                Ok(()) => Ok(out),
                Err(Error::NotHeld { .. }) => Err(Error::Lost {
                    resource,
                    why: LostReason::Refused,
                }),
                Err(e) => {
                    // The work was protected; only the release failed, and
                    // the keys expire by their TTL.
                    tracing::warn!(resource, error = %e, "release after the work failed");
                    Ok(out)
                }
            },
        }
    }

    async fn run(self) -> Result<Lease, Error> {
        let shared = &self.locker.shared;
        if self.resource.is_empty() {
            return Err(Error::invalid("resource", "the lock name is empty"));
        }
        let timing = shared.timing("ttl", self.ttl.unwrap_or(shared.ttl))?;
        self.retry.check()?;
        let key: Arc<str> = shared.key(&self.resource).into();
        let mut lease = wait::lock(shared, &self.resource, &key, timing, &self.retry).await?;
        if self.keep_alive {
            lease.keep_alive();
        }
        Ok(lease)
    }
}

impl<'a> IntoFuture for Acquire<'a> {
    type Output = Result<Lease, Error>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<Lease, Error>> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.run())
    }
}

fn vote(answer: &Result<AcquireReply, crate::NodeError>) -> Vote {
    match answer {
        Ok(AcquireReply::Acquired) => Vote::Yes,
        Ok(AcquireReply::Held(_)) => Vote::No,
        Err(_) => Vote::Failed,
    }
}

/// One attempt: send the acquire script to every node at once, decide at
/// quorum, and either hand out a lease that still has validity or undo
/// everything before returning the reason.
pub(crate) async fn attempt(
    shared: &Arc<Shared>,
    resource: &str,
    key: &Arc<str>,
    timing: Timing,
) -> Result<Lease, Error> {
    let token = Token::generate();
    // If this future is dropped mid-flight, some nodes may hold our token:
    // the guard releases it everywhere in the background.
    let mut guard =
        lease::ReleaseOnDrop::new(shared.clone(), key.clone(), token.clone(), timing, None);
    let start = Instant::now();
    let mut replies = fanout::until_decided(&shared.nodes, vote, |node| {
        let (key, token) = (key.clone(), token.clone());
        async move {
            node.acquire(&key, &token, timing.ttl_ms(), timing.node_timeout)
                .await
        }
    })
    .await;
    let elapsed = start.elapsed();

    let failure = match replies.tally.decision() {
        Decision::Reached if timing.validity(elapsed).is_some() => {
            // The slower nodes' answers cannot change the outcome: let them
            // finish on their own. The lease waits for them before its next
            // request, so a release cannot overtake a late SET.
            let in_flight = replies.detach();
            guard.disarm();
            return Ok(Lease::new(
                shared.clone(),
                resource.to_string(),
                key.clone(),
                token,
                timing,
                timing.valid_until(start),
                in_flight,
            ));
        }
        Decision::Reached => Error::ValidityExhausted {
            op: Op::Acquire,
            resource: resource.to_string(),
            elapsed,
            ttl: timing.ttl,
            drift: timing.drift,
        },
        Decision::Impossible | Decision::Pending => {
            // Wait for the stragglers: the cleanup below must reach every
            // node that may have applied the SET, and must not overtake it.
            replies.finish(vote).await;
            let held_on: Vec<Held> = replies
                .answers
                .iter()
                .filter_map(|(i, a)| match a {
                    Ok(AcquireReply::Held(expires_in)) => Some(Held {
                        node: shared.nodes[*i].id().clone(),
                        expires_in: *expires_in,
                    }),
                    _ => None,
                })
                .collect();
            let failed = replies.failures();
            if replies.tally.refused() {
                Error::Taken {
                    resource: resource.to_string(),
                    held_on,
                    failed,
                    nodes: replies.tally.nodes,
                    quorum: replies.tally.quorum,
                }
            } else {
                Error::NoQuorum {
                    op: Op::Acquire,
                    resource: resource.to_string(),
                    succeeded: replies.tally.yes,
                    quorum: replies.tally.quorum,
                    nodes: replies.tally.nodes,
                    failed,
                    refused_by: held_on,
                }
            }
        }
    };
    replies.finish(vote).await;
    // Undo on every node that did not plainly refuse: a node that timed out
    // or failed may still have applied the SET.
    let undo: Vec<_> = replies
        .answers
        .iter()
        .filter(|(_, a)| vote(a) != Vote::No)
        .map(|(i, _)| shared.nodes[*i].clone())
        .collect();
    lease::release_on(shared, &undo, key, &token, timing.node_timeout).await;
    guard.disarm();
    Err(failure)
}
