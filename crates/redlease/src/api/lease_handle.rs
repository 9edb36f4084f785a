//! [`LeaseHandle`]: what work running under a lease may see of it.

use crate::coord::ownership::Ownership;
use crate::core::lease_state::{watch, LostReason};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A view of a held lease for the work running under it
/// ([`Acquire::with`](crate::Acquire::with)): its name, validity and
/// loss signal. Cheap to clone; it cannot release or extend the lock.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redlease::Error> {
/// # let nodes = redlease_testkit::RedisNodes::start(1);
/// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
/// locker
///     .lock("sync")
///     .with(|lease| async move {
///         while !lease.is_lost() {
///             // ... one step, well inside lease.remaining() ...
/// #           break;
///         }
///     })
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LeaseHandle {
    /// The lease's record: its lock key, whose braced part is the resource
    /// name (see [`resource`](Self::resource)), and its state. Nothing
    /// here reads or sends its token.
    pub(super) owner: Arc<Ownership>,
    /// Where the name begins in the key.
    pub(super) name_at: usize,
    pub(super) fence: Option<u64>,
}

impl fmt::Debug for LeaseHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseHandle")
            .field("resource", &self.resource())
            .field("remaining", &self.remaining())
            .finish()
    }
}

impl LeaseHandle {
    /// The resource name.
    ///
    /// ```no_run
    /// # fn f(lease: &redlease::LeaseHandle) { println!("{}", lease.resource()); }
    /// ```
    pub fn resource(&self) -> &str {
        // The key is `prefix{name}`.
        let key = self.owner.key();
        &key[self.name_at..key.len() - 1]
    }

    /// The fencing token, with fencing on (see [`Lease::fencing_token`](crate::Lease::fencing_token)).
    ///
    /// ```no_run
    /// # fn f(lease: &redlease::LeaseHandle) { println!("token {:?}", lease.fencing_token()); }
    /// ```
    pub fn fencing_token(&self) -> Option<u64> {
        self.fence
    }

    /// Until when the lock is ours (renewals move it later).
    ///
    /// ```no_run
    /// # fn f(lease: &redlease::LeaseHandle) { let _ = lease.valid_until(); }
    /// ```
    pub fn valid_until(&self) -> Instant {
        self.owner.state.get().valid_until
    }

    /// Time left until [`valid_until`](Self::valid_until).
    ///
    /// ```no_run
    /// # fn f(lease: &redlease::LeaseHandle) { let _ = lease.remaining(); }
    /// ```
    pub fn remaining(&self) -> Duration {
        self.valid_until().saturating_duration_since(Instant::now())
    }

    /// Whether the lease can no longer be trusted (see [`Lease::is_lost`](crate::Lease::is_lost)).
    ///
    /// ```no_run
    /// # fn f(lease: &redlease::LeaseHandle) { assert!(!lease.is_lost()); }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.lost_reason().is_some()
    }

    /// Why the lease is lost, if it is (see [`Lease::lost_reason`](crate::Lease::lost_reason)).
    ///
    /// ```no_run
    /// # fn f(lease: &redlease::LeaseHandle) { assert_eq!(lease.lost_reason(), None); }
    /// ```
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.owner.state.get().lost_at(Instant::now())
    }

    /// Resolves when the lease is lost (see [`Lease::lost`](crate::Lease::lost)).
    ///
    /// ```no_run
    /// # async fn f(lease: redlease::LeaseHandle) { let why = lease.lost().await; }
    /// ```
    pub fn lost(&self) -> impl std::future::Future<Output = LostReason> + Send + 'static + use<> {
        crate::core::lease_state::lost(watch(self.owner.clone()))
    }
}
