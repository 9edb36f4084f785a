//! [`Election`]: one leader at a time among the processes that campaign
//! for a name, with a value it publishes and a term that fences it.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::api::acquire::Acquire;
use crate::api::lease::Lease;
use crate::coord::elect::{self, Record};
use crate::coord::engine::Engine;
use crate::coord::watch::Watching;
use crate::core::error::Error;
use crate::core::leader::Leader;
use crate::core::lease_state::LostReason;
use crate::core::lock_status::{LockStatus, Verdict};
use crate::core::mode::Hold;
use crate::core::retry::RetryPolicy;

/// The longest value a leader may proclaim, in bytes.
pub const MAX_LEADER_VALUE_LEN: usize = 64 * 1024;

/// An election on one name, from [`Locker::election`](crate::Locker::election):
/// processes [campaign](Self::campaign) with a value (an address, a
/// name), one at a time leads, and anyone can ask who
/// [leads](Self::leader) or [observe](Self::observe) each change.
///
/// The lead is an exclusive lock on the name, over the same quorum,
/// fencing, guards and queue as every lock: campaigners wait in turn, the
/// leader's lease is kept alive, and a leader that can no longer trust
/// its lease is told at once ([`Leadership::lost`]). Its term is its
/// lease's fencing token (drawn whatever the Locker's
/// [`fencing`](crate::LockerBuilder::fencing) setting): every new leader's
/// is higher, so a service that remembers the highest term it saw can
/// refuse a deposed leader's writes. The name is the lock's name: `redlease
/// status` shows the leader as its holder.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redlease::Error> {
/// # let nodes = redlease_testkit::RedisNodes::start(1);
/// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
/// let election = locker.election("scheduler");
/// let mut leadership = election.campaign("10.0.0.5:8080").await?; // waits in turn
/// let leader = election.leader().await?.expect("we lead");
/// assert_eq!((leader.value.as_str(), leader.term), ("10.0.0.5:8080", leadership.term()));
/// leadership.proclaim("10.0.0.5:9090").await?; // moved
/// tokio::select! {
///     why = leadership.lost() => eprintln!("deposed: {why}"),
///     () = async { /* lead: schedule the jobs, passing leadership.term() */ } => {}
/// }
/// leadership.resign().await
/// # }
/// ```
#[derive(Clone)]
pub struct Election<'a> {
    engine: &'a Arc<Engine>,
    name: String,
}

impl std::fmt::Debug for Election<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.name)
            .finish()
    }
}

impl std::fmt::Debug for Campaign<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Campaign")
            .field("name", &self.name)
            .field("value", &self.value)
            .field("wait", &self.wait)
            .field("ttl", &self.ttl)
            .finish()
    }
}

impl<'a> Election<'a> {
    pub(crate) fn new(engine: &'a Arc<Engine>, name: String) -> Self {
        Election { engine, name }
    }

    /// The election's name (its lock's name).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Campaigns to lead with `value`: waits in turn for the lead (for
    /// ever unless [`Campaign::wait`] says otherwise), then publishes the
    /// value on a quorum and keeps the lead alive until the
    /// [`Leadership`] is resigned or dropped. A value longer than
    /// [`MAX_LEADER_VALUE_LEN`] is [`Error::InvalidInput`] before any I/O.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future at any point leaves nothing behind: a waiter
    /// leaves the line, and a lead won but not yet published is given back.
    pub fn campaign(&self, value: impl Into<String>) -> Campaign<'a> {
        Campaign {
            engine: self.engine,
            name: self.name.clone(),
            value: value.into(),
            wait: None,
            ttl: None,
        }
    }

    /// Who leads now, as a quorum of the nodes tells it: the leader's
    /// value, term and holder, or `None` when nobody leads (nobody
    /// campaigned, the leader resigned, its lease ended, or it won and has
    /// not published its value yet). One round trip per node.
    pub async fn leader(&self) -> Result<Option<Leader>, Error> {
        let status = crate::coord::watch::inspect(self.engine, &self.name).await?;
        Ok(status.leader())
    }

    /// Each change of leader (or of its value), in order: the leader now
    /// on the first call, then each leader, value or vacancy after it.
    /// Driven by notifications, as [`Watch`](crate::Watch) is; terms never
    /// go back (a leader seen later never has a lower term than one told
    /// before), nor does a leader's value (its revision), and changes
    /// faster than a read may be told as one.
    pub fn observe(&self) -> Observe {
        Observe {
            watching: Watching::new(self.engine.clone(), self.name.clone()),
            last: None,
            status: None,
            told: None,
        }
    }
}

/// A campaign for an election's lead, from [`Election::campaign`]; await
/// it for the [`Leadership`].
#[must_use = "a campaign does nothing until it is awaited"]
pub struct Campaign<'a> {
    engine: &'a Arc<Engine>,
    name: String,
    value: String,
    wait: Option<Duration>,
    ttl: Option<Duration>,
}

impl Campaign<'_> {
    /// Gives up after `wait` in line: [`Error::WaitTimeout`].
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// The lead's lease TTL (the Locker's by default): how long a leader
    /// that dies leads on paper before the next one may take over (plus
    /// the Locker's [lock-delay](crate::LockerBuilder::lock_delay)).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// The campaign as a boxed future (for the blocking facade).
    pub(crate) fn into_future_boxed(self) -> <Self as IntoFuture>::IntoFuture {
        self.into_future()
    }

    async fn run(self) -> Result<Leadership, Error> {
        check_value(&self.value)?;
        let retry = match self.wait {
            Some(wait) => RetryPolicy::within(wait),
            None => RetryPolicy::forever(),
        };
        let mut request = Acquire::new(self.engine, self.name.clone(), retry, Hold::Exclusive)
            .fenced()
            .keep_alive();
        if let Some(ttl) = self.ttl {
            request = request.ttl(ttl);
        }
        let lease = request.await?;
        let Some(term) = lease.fencing_token() else {
            let _ = lease.release().await;
            return Err(Error::invalid(
                "election",
                "the lead was won without a term",
            ));
        };
        let record = Record {
            term,
            revision: 1,
            value: self.value,
        };
        if let Err(e) = proclaim(&lease, &record).await {
            // Not published: nobody would see us lead. Give it back.
            let _ = lease.release().await;
            return Err(e);
        }
        Ok(Leadership::new(lease, record))
    }
}

impl<'a> IntoFuture for Campaign<'a> {
    type Output = Result<Leadership, Error>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<Leadership, Error>> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.run())
    }
}

/// The lead of an election, won by [`Election::campaign`]: a kept-alive
/// lease on the election's name, with the value published for it.
/// Dropping it resigns (in the background); a lost lead is told by
/// [`lost`](Self::lost) at once, as a lease's is.
#[must_use = "dropping a Leadership resigns"]
pub struct Leadership {
    lease: Lease,
    record: Arc<Mutex<Record>>,
    /// The highest revision sent, written or not: the next proclaim's is
    /// higher, so a failed one that lands late never overwrites it.
    sent: u64,
    _keeper: Keeper,
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("election", &self.lease.resource())
            .field("term", &self.term())
            .field("value", &self.value())
            .finish_non_exhaustive()
    }
}

impl Leadership {
    fn new(lease: Lease, record: Record) -> Leadership {
        let record = Arc::new(Mutex::new(record));
        let keeper = Keeper::start(&lease, record.clone());
        let sent = lock(&record).revision;
        Leadership {
            lease,
            record,
            sent,
            _keeper: keeper,
        }
    }

    /// The term: the lease's fencing token, higher than every earlier
    /// leader's.
    pub fn term(&self) -> u64 {
        lock(&self.record).term
    }

    /// The value last proclaimed.
    pub fn value(&self) -> String {
        lock(&self.record).value.clone()
    }

    /// Publishes a new value for this lead on a quorum (readers see the
    /// latest any node of a quorum shows). [`Error::NotHeld`] when the
    /// lead is gone. On an error, [`value`](Self::value) stays the old
    /// one, but the new one may have reached some nodes and be read:
    /// proclaim again to settle it (each proclaim supersedes every one
    /// sent before it, written or not).
    pub async fn proclaim(&mut self, value: impl Into<String>) -> Result<(), Error> {
        let value = value.into();
        check_value(&value)?;
        self.sent += 1;
        let next = Record {
            term: lock(&self.record).term,
            revision: self.sent,
            value,
        };
        proclaim(&self.lease, &next).await?;
        let mut now = lock(&self.record);
        if now.revision < next.revision {
            *now = next;
        }
        Ok(())
    }

    /// Resolves when the lead can no longer be trusted (see
    /// [`Lease::lost`]). Cancel safe.
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static + use<> {
        self.lease.lost()
    }

    /// Whether the lead can no longer be trusted.
    pub fn is_lost(&self) -> bool {
        self.lease.is_lost()
    }

    /// The lease that holds the lead (its validity, handle, fencing token).
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// The lease alone, its record no longer kept (for the blocking
    /// facade's drop, which gives it back).
    pub(crate) fn into_lease(self) -> Lease {
        self.lease
    }

    /// Gives the lead up at once: the next campaigner in line leads, and
    /// observers are told. [`Error::NotHeld`] if it was already lost.
    pub async fn resign(self) -> Result<(), Error> {
        let Leadership { lease, _keeper, .. } = self;
        drop(_keeper);
        lease.release().await
    }
}

/// Each change of an election's leader, from [`Election::observe`].
///
/// # Cancel safety
///
/// [`next`](Self::next) is cancel safe: a change read but not returned is
/// told by the next call.
#[derive(Debug)]
pub struct Observe {
    watching: Watching,
    /// The last change told, once one was.
    last: Option<Told>,
    /// The nodes' answers behind the last change told.
    status: Option<LockStatus>,
    /// The highest term told, and its highest revision.
    told: Option<(u64, u64)>,
}

/// What an observer told: the leader (its term, revision and value;
/// `None`: nobody led), and whether the nodes could tell.
type Told = (Option<(u64, u64, String)>, bool);

impl Observe {
    /// The leader now on the first call (`None`: nobody leads, or too few
    /// nodes answered to tell: [`status`](Self::status) says which); then
    /// waits for the next change: a new leader, a new value, nobody
    /// leading, or the nodes no longer (or again) able to tell. A leader
    /// whose term is below one already told is never told.
    pub async fn next(&mut self) -> Result<Option<Leader>, Error> {
        loop {
            let status = self.watching.changed().await?;
            let leader = status.leader();
            let key = leader
                .as_ref()
                .map(|l| (l.term, l.revision, l.value.clone()));
            if let (Some((term, revision, _)), Some((told, told_revision))) = (&key, self.told)
                && (*term, *revision) < (told, told_revision)
            {
                // An older leader, or an older value of this one, read
                // from nodes a newer one has not reached: never told
                // after the newer one.
                continue;
            }
            let known = !matches!(status.verdict(), Verdict::Unknown { .. });
            let now = (key, known);
            if self.last.as_ref() != Some(&now) {
                if let Some((term, revision, _)) = &now.0 {
                    self.told = self.told.max(Some((*term, *revision)));
                }
                self.last = Some(now);
                self.status = Some(status);
                return Ok(leader);
            }
        }
    }
}

impl Observe {
    /// What every node answered at the last change told (its
    /// [`verdict`](LockStatus::verdict) is unknown when too few answered
    /// to tell who leads); `None` before the first.
    pub fn status(&self) -> Option<&LockStatus> {
        self.status.as_ref()
    }
}

/// Publishes `record` for `lease` at quorum.
async fn proclaim(lease: &Lease, record: &Record) -> Result<(), Error> {
    let (engine, ownership, timing) = lease.parts();
    elect::proclaim(
        engine,
        ownership,
        record,
        lease.resource(),
        timing.node_timeout,
    )
    .await
}

fn check_value(value: &str) -> Result<(), Error> {
    if value.len() > MAX_LEADER_VALUE_LEN {
        return Err(Error::invalid(
            "value",
            format!(
                "{} bytes is longer than the longest leader value, {MAX_LEADER_VALUE_LEN} bytes",
                value.len()
            ),
        ));
    }
    Ok(())
}

fn lock(record: &Mutex<Record>) -> std::sync::MutexGuard<'_, Record> {
    record.lock().unwrap_or_else(|p| p.into_inner())
}

/// Writes the leader record again before it expires, while the lead
/// lasts; stopped when dropped.
struct Keeper(Option<tokio::task::AbortHandle>);

impl Keeper {
    fn start(lease: &Lease, record: Arc<Mutex<Record>>) -> Keeper {
        let (engine, ownership, timing) = lease.parts();
        let (engine, ownership) = (engine.clone(), ownership.clone());
        let resource = lease.resource().to_string();
        let every = elect::record_expiry(&engine) / 3;
        let lost = lease.lost();
        let keep = async move {
            tokio::pin!(lost);
            loop {
                tokio::select! {
                    _ = &mut lost => return,
                    () = tokio::time::sleep(every) => {}
                }
                let now = lock(&record).clone();
                let wrote =
                    elect::proclaim(&engine, &ownership, &now, &resource, timing.node_timeout)
                        .await;
                if let Err(e) = wrote {
                    tracing::debug!(resource, error = %e, "leader record not written again");
                }
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => Keeper(Some(runtime.spawn(keep).abort_handle())),
            Err(_) => Keeper(None),
        }
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
        }
    }
}
