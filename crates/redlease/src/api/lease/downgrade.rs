//! [`Lease::downgrade`]: a write lease becomes a read lease, atomically on
//! a quorum, with no writer able to take the lock in between; and why a
//! read lease does not upgrade.

use crate::core::error::Error;
use crate::core::mode::Hold;

use super::Lease;

impl Lease {
    /// Turns this lease, held alone (a writer's), into a read lease of
    /// the same names, token and validity, on a quorum of the nodes at
    /// once: no writer can take the lock in between, and the readers that
    /// wait in line first join at once (a writer first in line keeps
    /// those behind it waiting). A kept-alive lease stays kept alive. The
    /// fencing token is the writer's: the generation readers after it
    /// read.
    ///
    /// A lease already shared, or a permit, is
    /// [`Error::InvalidInput`](crate::Error::InvalidInput), with nothing
    /// sent. If a quorum did not confirm the downgrade (nodes failed), the
    /// lease is given back, as a dropped one is, and the error says why:
    /// some nodes may hold it shared, others alone, and neither is a lease
    /// one can trust.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// let writer = locker.write_lock("catalog").await?;
    /// // ... rewrite the catalog ...
    /// let reader = writer.downgrade().await?;
    /// assert_eq!(reader.mode(), redlease::LockMode::Shared);
    /// // ... read it back, beside other readers, no writer in between ...
    /// reader.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes drops the lease, which is
    /// given back in the background, in either form.
    pub async fn downgrade(mut self) -> Result<Lease, Error> {
        let holds = self.guard.ownership.claim.holds();
        if holds.iter().any(|h| *h != Hold::Exclusive) {
            return Err(Error::invalid(
                "lease",
                "only a lease held alone (a writer's) downgrades: this one is shared or a \
                 semaphore's permit",
            ));
        }
        let (guard, _, label) = self.guard_and_label();
        let (guard, kept_alive) = guard.downgrade(label).await?;
        let shared = guard.ownership.clone();
        let mut lease = Lease {
            view: super::LeaseHandle {
                owner: shared,
                name_at: self.view.name_at,
                fence: self.view.fence,
            },
            guard,
            granted: std::mem::take(&mut self.granted),
            late: self.late.take(),
            replicas: self.replicas,
            all: self.all.take(),
        };
        if kept_alive {
            lease.start_renewal();
        }
        Ok(lease)
    }

    /// A read lease does not become a write lease: refused at once, with
    /// nothing sent, and the lease left as it is. Two readers that both
    /// upgraded would each wait for the other to leave, for ever; so does
    /// a task that takes the write lock while it holds the read lock
    /// (locks are not reentrant, see the crate docs). Release the read
    /// lease, take the write lock, and check again what was read, which
    /// may have changed in between.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// let reader = locker.read_lock("catalog").await?;
    /// assert!(matches!(reader.upgrade(), Err(redlease::Error::InvalidInput { .. })));
    /// reader.release().await?;
    /// let writer = locker.write_lock("catalog").await?;
    /// # writer.release().await }
    /// ```
    pub fn upgrade(&self) -> Result<Lease, Error> {
        Err(Error::invalid(
            "lease",
            "a read lease does not upgrade: two readers upgrading at once would wait for each \
             other for ever. Release it, take the write lock, and read again what the write \
             depends on",
        ))
    }
}
