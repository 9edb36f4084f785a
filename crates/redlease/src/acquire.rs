//! Taking a lock: the request builder and one attempt of the algorithm.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Held, Op};
use crate::fanout::{self, flag_vote, Replies};
use crate::fencing;
use crate::keys::LockKeys;
use crate::lease::{self, Lease, LeaseHandle};
use crate::lease_state::LostReason;
use crate::locker::{Locker, Shared};
use crate::node::AcquireReply;
use crate::quorum::{quorum, Decision, Vote};
use crate::retry::RetryPolicy;
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

impl std::fmt::Debug for Acquire<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Acquire")
            .field("resource", &self.resource)
            .field("ttl", &self.ttl)
            .field("retry", &self.retry)
            .field("keep_alive", &self.keep_alive)
            .finish_non_exhaustive()
    }
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
        if self.keep_alive {
            timing.check_renewal("ttl", shared.renew_fraction)?;
        }
        self.retry.check()?;
        let keys = shared.keys(&self.resource);
        let mut lease = wait::lock(shared, &self.resource, &keys, timing, &self.retry).await?;
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
        Ok(AcquireReply::Acquired(_)) => Vote::Yes,
        Ok(AcquireReply::Held(_)) => Vote::No,
        Err(_) => Vote::Failed,
    }
}

/// One attempt: send the acquire script to every node at once, decide at
/// quorum, settle the fencing token, and either hand out a lease that still
/// has validity or undo everything before returning the reason.
pub(crate) async fn attempt(
    shared: &Arc<Shared>,
    resource: &str,
    keys: &LockKeys,
    timing: Timing,
) -> Result<Lease, Error> {
    let token = Token::generate();
    // If this future is dropped mid-flight, some nodes may hold our token:
    // the guard releases it everywhere in the background.
    let mut guard =
        lease::ReleaseOnDrop::new(shared.clone(), keys.lock.clone(), token.clone(), timing);
    let start = Instant::now();
    let written = guard.written().clone();
    let mut replies = fanout::until_decided(&shared.nodes, vote, |node| {
        let (keys, token, written) = (keys.clone(), token.clone(), written.clone());
        async move {
            let reply = node
                .acquire(&keys, &token, timing.ttl_ms(), timing.node_timeout)
                .await;
            let unwritten = match &reply {
                Ok(AcquireReply::Held(_)) => true,
                Err(e) => e.kind().never_sent(),
                Ok(AcquireReply::Acquired(_)) => false,
            };
            if unwritten {
                written.ruled_out(node.id().index());
            }
            reply
        }
    })
    .await;

    let failure = match replies.tally.decision() {
        Decision::Reached => {
            let (granted_by, fences) = granted(&replies);
            match settle_fence(shared, keys, fences, timing, start).await {
                Ok(fence) => {
                    // The slower nodes' answers cannot change the outcome: let
                    // them finish on their own. The lease waits for them before
                    // its next request, so a release cannot overtake a late SET.
                    guard.set_in_flight(replies.detach(&shared.background));
                    return Ok(Lease::new(
                        guard,
                        resource.to_string(),
                        timing.valid_until(start),
                        fence,
                        granted_by,
                    ));
                }
                Err(failure) => failure.into_error(resource),
            }
        }
        Decision::Impossible | Decision::Pending => {
            // Wait for the stragglers: the cleanup below must reach every
            // node that may have applied the SET, and must not overtake it.
            replies.finish(vote).await;
            refusal(shared, resource, &replies)
        }
    };
    replies.finish(vote).await;
    // Undo on every node that may hold the token: one that timed out or
    // failed may still have applied the SET.
    lease::release_on(shared, &written, &keys.lock, &token, timing.node_timeout).await;
    guard.disarm();
    Err(failure)
}

/// Why a quorum that granted the lock still gave no lease.
enum Unsettled {
    Expired {
        elapsed: Duration,
        timing: Timing,
    },
    WriteBack {
        succeeded: usize,
        quorum: usize,
        nodes: usize,
        failed: Vec<crate::NodeError>,
    },
}

impl Unsettled {
    fn into_error(self, resource: &str) -> Error {
        match self {
            Unsettled::Expired { elapsed, timing } => Error::ValidityExhausted {
                op: Op::Acquire,
                resource: resource.to_string(),
                elapsed,
                ttl: timing.ttl,
                drift: timing.drift,
            },
            Unsettled::WriteBack {
                succeeded,
                quorum,
                nodes,
                failed,
            } => Error::NoQuorum {
                op: Op::Acquire,
                resource: resource.to_string(),
                succeeded,
                quorum,
                nodes,
                failed,
                refused_by: Vec::new(),
            },
        }
    }
}

/// The fencing token of a granted acquisition: the largest counter the
/// granting nodes reported, stored on a quorum (written back if needed) and
/// all within the lease's validity.
async fn settle_fence(
    shared: &Shared,
    keys: &LockKeys,
    granted: Vec<u64>,
    timing: Timing,
    start: Instant,
) -> Result<u64, Unsettled> {
    let (fence, write_back) = fencing::choose(&granted, quorum(shared.nodes.len()));
    if write_back {
        let mut raised = fanout::until_decided(&shared.nodes, flag_vote, |node| {
            let keys = keys.clone();
            async move { node.raise_fence(&keys, fence, timing.node_timeout).await }
        })
        .await;
        if raised.tally.decision() != Decision::Reached {
            raised.finish(flag_vote).await;
            return Err(Unsettled::WriteBack {
                succeeded: raised.tally.yes,
                quorum: raised.tally.quorum,
                nodes: raised.tally.nodes,
                failed: raised.failures(),
            });
        }
        raised.detach(&shared.background);
    }
    let elapsed = start.elapsed();
    // Never hand out a lease that would be reported lost at once.
    if !timing.usable(elapsed) {
        return Err(Unsettled::Expired { elapsed, timing });
    }
    Ok(fence)
}

/// The nodes that granted the lock, and the fencing counters they reported.
fn granted(replies: &Replies<AcquireReply>) -> (Vec<usize>, Vec<u64>) {
    replies
        .answers
        .iter()
        .filter_map(|(i, a)| match a {
            Ok(AcquireReply::Acquired(fence)) => Some((*i, *fence)),
            _ => None,
        })
        .unzip()
}

/// The error for an attempt that no quorum granted.
fn refusal(shared: &Shared, resource: &str, replies: &Replies<AcquireReply>) -> Error {
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
