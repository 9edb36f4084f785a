//! Leases beyond one name and one process: a multi-lock's names
//! (`Locker::lock_all`), the export as a handle another Locker adopts
//! (`Locker::adopt`), and keeping alive a lease taken without it (an
//! adopted one, say).

use super::Lease;
use crate::coord::guard::ReleaseOnDrop;
use crate::core::error::Error;
use crate::core::mode::LockMode;

/// The names of a multi-lock, in their canonical order, and each one's
/// fencing token when drawn.
pub(super) struct AllNames {
    pub(super) names: Vec<String>,
    pub(super) fences: Option<Vec<u64>>,
}

impl Lease {
    /// The names this lease holds: its [`resource`](Self::resource), or
    /// every name of a [`lock_all`](crate::Locker::lock_all), in their
    /// canonical (sorted) order.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// let lease = locker.lock_all(["to:7", "from:3"]).await?;
    /// assert_eq!(lease.resources().collect::<Vec<_>>(), ["from:3", "to:7"]);
    /// # lease.release().await }
    /// ```
    pub fn resources(&self) -> impl Iterator<Item = &str> {
        let all = self
            .all
            .as_ref()
            .map(|all| all.names.iter().map(String::as_str));
        let one = all.is_none().then(|| self.resource());
        one.into_iter().chain(all.into_iter().flatten())
    }

    /// The fencing token of `name`, one of [`resources`](Self::resources),
    /// if the Locker draws them: a multi-lock draws one per name, each
    /// larger than that of every earlier holder of that name.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// let locker = redlease::Locker::builder(nodes.urls())
    ///     .fencing(true)
    /// #   .advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)) // brand-new test servers
    ///     .build()?;
    /// let lease = locker.lock_all(["account:1", "account:2"]).await?;
    /// let (one, two) = (lease.fencing_token_of("account:1"), lease.fencing_token_of("account:2"));
    /// assert!(one.is_some() && two.is_some());
    /// # lease.release().await }
    /// ```
    pub fn fencing_token_of(&self, name: &str) -> Option<u64> {
        match &self.all {
            None => (name == self.resource())
                .then(|| self.fencing_token())
                .flatten(),
            Some(all) => {
                let i = all.names.iter().position(|n| n == name)?;
                all.fences.as_ref().map(|f| f[i])
            }
        }
    }

    /// The lease's guard, for coord to act on, beside its resource and
    /// its label for an error, worked out only for one: its resource, or
    /// every name of a multi-lock (a refusal of the release or extend of
    /// several names says no more than that one or more of them is gone).
    pub(super) fn guard_and_label(
        &mut self,
    ) -> (
        &mut ReleaseOnDrop,
        &str,
        impl Fn() -> String + Send + Sync + '_,
    ) {
        let (view, all) = (&self.view, &self.all);
        let label = move || match all {
            None => view.resource().to_string(),
            Some(all) => all.names.join(", "),
        };
        (&mut self.guard, view.resource(), label)
    }

    /// How this lease holds `name`, one of [`resources`](Self::resources):
    /// a set taken with [`and_read`](crate::Acquire::and_read) holds some
    /// names shared and the others alone.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// use redlease::LockMode;
    /// let lease = locker.lock("report").and_read(["catalog"]).await?;
    /// assert_eq!(lease.mode_of("report"), Some(LockMode::Exclusive));
    /// assert_eq!(lease.mode_of("catalog"), Some(LockMode::Shared));
    /// assert_eq!(lease.mode_of("other"), None);
    /// # lease.release().await }
    /// ```
    pub fn mode_of(&self, name: &str) -> Option<LockMode> {
        match &self.all {
            None => (name == self.resource()).then(|| self.mode()),
            Some(all) => {
                let i = all.names.iter().position(|n| n == name)?;
                self.guard.ownership.holds().get(i).map(|h| h.mode())
            }
        }
    }

    /// Hands the lease over as a handle: a string another Locker (in this
    /// process or another, with the same nodes and key prefix) turns back
    /// into a lease with [`Locker::adopt`](crate::Locker::adopt), or gives
    /// back with [`Locker::release_handle`](crate::Locker::release_handle).
    /// The handle holds the names, the lease's token, its mode, TTL and
    /// fencing tokens: it is a secret like the token (whoever has it can
    /// release the lease), and tells nothing of any other holder's token.
    ///
    /// This lease object is done with: it is not released here, no longer
    /// renewed here, and no longer given back by this Locker's
    /// [`close`](crate::Locker::close). The lock stays held until its TTL
    /// runs out, unless the handle's holder extends or releases it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let build = || redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build(); // brand-new test servers
    /// # let (scheduler, worker) = (build()?, build()?);
    /// // A scheduler takes the lock and hands it to the worker it starts:
    /// let handle = scheduler.lock("job:42").await?.export();
    /// // ... in the worker, given the handle (an argument, a variable) ...
    /// let mut lease = worker.adopt(&handle).await?;
    /// lease.extend(std::time::Duration::from_secs(30)).await?;
    /// lease.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn export(mut self) -> String {
        let engine = &self.guard.engine;
        let names: Vec<String> = self.resources().map(str::to_string).collect();
        let fences = match &self.all {
            Some(all) => all.fences.clone(),
            None => self.fencing_token().map(|f| vec![f]),
        };
        let handle = crate::core::handle::Exported {
            holds: self.guard.ownership.holds().to_vec(),
            ttl: self.guard.timing.ttl,
            token: self.guard.ownership.token.clone(),
            prefix: engine.settings().prefix.clone(),
            names,
            fences,
        }
        .encode();
        // Off this Locker's books, not released.
        self.guard.unregister();
        self.guard.disarm();
        handle
    }

    /// Keeps this lease alive from now on, as if it had been taken with
    /// `.keep_alive()`: for a lease taken without it, or adopted from a
    /// handle ([`Locker::adopt`](crate::Locker::adopt)). A lease already
    /// kept alive is returned as it is. A TTL too short for renewal (see
    /// [`Acquire::keep_alive`](crate::Acquire::keep_alive)) is
    /// [`Error::InvalidInput`], and the lease is released.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// let lease = locker.lock("job").await?;
    /// // ... it turns out the work will take a while ...
    /// let lease = lease.keep_alive()?;
    /// # lease.release().await }
    /// ```
    pub fn keep_alive(mut self) -> Result<Lease, Error> {
        if self.guard.renewal.is_none() {
            let fraction = self.guard.engine.settings().renew_fraction;
            self.guard.timing.check_renewal("ttl", fraction)?;
            self.start_renewal();
        }
        Ok(self)
    }
}
