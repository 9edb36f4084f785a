//! [`Election`]: an election's calls for a thread without an async
//! runtime.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::api::blocking::runtime::Shared;
use crate::core::error::Error;
use crate::core::leader::Leader;
use crate::core::lease_state::LostReason;

/// The election on one name, from [`Locker::election`](super::Locker::election):
/// the blocking face of [`crate::Election`], with the same rules.
///
/// ```
/// use std::time::Duration;
/// # fn main() -> Result<(), redlease::Error> {
/// # let nodes = redlease_testkit::RedisNodes::start(1);
/// # let locker = redlease::blocking::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(Duration::ZERO)).build()?; // brand-new test servers
/// let election = locker.election("scheduler");
/// let leadership = election.campaign("10.0.0.5:8080")?; // waits in turn
/// assert_eq!(election.leader()?.map(|l| l.term), Some(leadership.term()));
/// leadership.resign()
/// # }
/// ```
pub struct Election<'a> {
    shared: &'a Arc<Shared>,
    inner: crate::Election<'a>,
}

impl fmt::Debug for Election<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

impl<'a> Election<'a> {
    pub(super) fn new(shared: &'a Arc<Shared>, inner: crate::Election<'a>) -> Self {
        Election { shared, inner }
    }

    /// Campaigns to lead with `value`, waiting in turn for as long as it
    /// takes ([`crate::Election::campaign`]).
    ///
    /// # Blocking
    ///
    /// Until this process leads.
    pub fn campaign(&self, value: impl Into<String>) -> Result<Leadership, Error> {
        let campaign = self.inner.campaign(value);
        let inner = self.shared.block_on(campaign.into_future_boxed())??;
        Ok(Leadership::new(inner, self.shared.clone()))
    }

    /// [`campaign`](Self::campaign), giving up after `wait` in line:
    /// [`Error::WaitTimeout`].
    ///
    /// # Blocking
    ///
    /// Up to `wait`, and the last attempt's round trip.
    pub fn campaign_within(
        &self,
        value: impl Into<String>,
        wait: Duration,
    ) -> Result<Leadership, Error> {
        let campaign = self.inner.campaign(value).wait(wait);
        let inner = self.shared.block_on(campaign.into_future_boxed())??;
        Ok(Leadership::new(inner, self.shared.clone()))
    }

    /// Who leads now ([`crate::Election::leader`]).
    ///
    /// # Blocking
    ///
    /// One round trip per node, at once, each bounded by the node timeout.
    pub fn leader(&self) -> Result<Option<Leader>, Error> {
        self.shared.block_on(self.inner.leader())?
    }

    /// Each change of leader, in order ([`crate::Election::observe`]).
    pub fn observe(&self) -> Observe {
        Observe {
            inner: self.inner.observe(),
            shared: self.shared.clone(),
        }
    }
}

/// The lead of an election (the blocking face of [`crate::Leadership`]).
/// Dropping it resigns, waiting up to [`DROP_WAIT`](super::DROP_WAIT) as
/// a dropped [`Lease`](super::Lease) does.
#[must_use = "dropping a Leadership resigns"]
pub struct Leadership {
    inner: Option<crate::Leadership>,
    shared: Arc<Shared>,
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner {
            Some(inner) => inner.fmt(f),
            None => f.write_str("Leadership(resigned)"),
        }
    }
}

impl Leadership {
    fn new(inner: crate::Leadership, shared: Arc<Shared>) -> Self {
        Leadership {
            inner: Some(inner),
            shared,
        }
    }

    fn inner(&self) -> &crate::Leadership {
        self.inner.as_ref().expect("whole until resigned")
    }

    /// The term ([`crate::Leadership::term`]).
    pub fn term(&self) -> u64 {
        self.inner().term()
    }

    /// The value last proclaimed.
    pub fn value(&self) -> String {
        self.inner().value()
    }

    /// Whether the lead can no longer be trusted.
    pub fn is_lost(&self) -> bool {
        self.inner().is_lost()
    }

    /// Why the lead can no longer be trusted, if it cannot.
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.inner().lease().lost_reason()
    }

    /// Publishes a new value ([`crate::Leadership::proclaim`]).
    ///
    /// # Blocking
    ///
    /// One round trip per node, at once, each bounded by the node timeout.
    pub fn proclaim(&mut self, value: impl Into<String>) -> Result<(), Error> {
        let inner = self.inner.as_mut().expect("whole until resigned");
        self.shared.block_on(inner.proclaim(value))?
    }

    /// Gives the lead up at once ([`crate::Leadership::resign`]).
    ///
    /// # Blocking
    ///
    /// One round trip per node, at once, each bounded by the node timeout.
    pub fn resign(mut self) -> Result<(), Error> {
        let inner = self.inner.take().expect("whole until resigned");
        self.shared.block_on(inner.resign())?
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            self.shared.drop_lease(inner.into_lease());
        }
    }
}

/// Each change of an election's leader (the blocking face of
/// [`crate::Observe`]); an iterator too, which ends after an error.
pub struct Observe {
    inner: crate::Observe,
    shared: Arc<Shared>,
}

impl fmt::Debug for Observe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

impl Observe {
    /// The leader now on the first call, then the next change.
    ///
    /// # Blocking
    ///
    /// Until the leader changes.
    pub fn next_change(&mut self) -> Result<Option<Leader>, Error> {
        self.shared.block_on(self.inner.next())?
    }

    /// [`next_change`](Self::next_change), waiting at most `wait`: `Ok(None)`
    /// when nothing changed meanwhile.
    pub fn next_within(&mut self, wait: Duration) -> Result<Option<Option<Leader>>, Error> {
        // Made on the facade's runtime: a timer needs one.
        let next = async { tokio::time::timeout(wait, self.inner.next()).await };
        match self.shared.block_on(next)? {
            Ok(told) => told.map(Some),
            Err(_elapsed) => Ok(None),
        }
    }
}

impl Iterator for Observe {
    type Item = Result<Option<Leader>, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        Some(self.next_change())
    }
}
