//! [`Advanced`]: a Locker's expert settings, set through
//! [`LockerBuilder::advanced`](crate::LockerBuilder::advanced) and checked
//! by its `build()` with the rest.

use std::time::Duration;

use crate::core::error::Error;
use crate::core::validity::{DriftModel, MAX_TTL};

/// Settings most Lockers never change: the clock-drift allowance, how
/// often kept-alive leases are renewed, the restart quarantine, the
/// clock-jump guard, the fencing counters' expiry and the express
/// connection. Each default is the
/// safe choice; change one only for the reason its method gives.
///
/// Reached through [`LockerBuilder::advanced`](crate::LockerBuilder::advanced),
/// whose closure gets the settings so far and returns them changed;
/// [`build`](crate::LockerBuilder::build) checks them with the rest, and
/// a setting it refuses is named `advanced.<setting>` in
/// [`Error::InvalidInput`].
///
/// | setting | default |
/// |---|---|
/// | [`drift_factor`](Self::drift_factor), [`drift_floor`](Self::drift_floor) | 0.01, 2 ms (drift = ttl × 1% + 2 ms) |
/// | [`renew_fraction`](Self::renew_fraction) | 1/3 |
/// | [`restart_quarantine`](Self::restart_quarantine) | the TTL plus its drift allowance |
/// | [`clock_jump_guard`](Self::clock_jump_guard) | on |
/// | [`fence_expiry`](Self::fence_expiry) | 10 minutes |
/// | [`express_connection`](Self::express_connection) | off |
///
/// ```
/// use std::time::Duration;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redlease::Error> {
/// let locker = redlease::Locker::builder(["redis://127.0.0.1:6379"])
///     .ttl(Duration::from_secs(30))
///     .advanced(|a| a.drift_factor(0.02).restart_quarantine(Duration::from_secs(61)))
///     .build()?;
/// # let _ = locker; Ok(()) }
/// ```
#[derive(Clone, Debug)]
#[must_use = "the closure passed to LockerBuilder::advanced must return the settings"]
pub struct Advanced {
    pub(super) drift: DriftModel,
    pub(super) renew_fraction: f64,
    /// `None`: the default, 10 minutes.
    pub(super) fence_expiry: Option<Duration>,
    /// `None`: the default, the TTL plus its drift allowance.
    pub(super) quarantine: Option<Duration>,
    pub(super) clock_guard: bool,
    pub(super) express: bool,
}

impl Default for Advanced {
    fn default() -> Self {
        Advanced {
            drift: DriftModel::DEFAULT,
            renew_fraction: 1.0 / 3.0,
            fence_expiry: None,
            quarantine: None,
            clock_guard: true,
            express: false,
        }
    }
}

impl Advanced {
    /// Share of the TTL set aside for clocks running at different rates on
    /// different nodes, in `[0, 1)`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// let locker = redlease::Locker::builder(["redis://127.0.0.1:6379"])
    ///     .advanced(|a| a.drift_factor(0.02))
    ///     .build()?;
    /// # let _ = locker; Ok(()) }
    /// ```
    pub fn drift_factor(mut self, factor: f64) -> Self {
        self.drift.factor = factor;
        self
    }

    /// Fixed part of the drift allowance, added to `ttl × drift_factor`.
    /// At most [`MAX_TTL`](crate::MAX_TTL) (and in practice far below the
    /// TTL, which must outlast twice the allowance):
    /// [`build`](crate::LockerBuilder::build) refuses more as
    /// [`Error::InvalidInput`] for `advanced.drift_floor`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// let locker = redlease::Locker::builder(["redis://127.0.0.1:6379"])
    ///     .advanced(|a| a.drift_floor(std::time::Duration::from_millis(5)))
    ///     .build()?;
    /// # let _ = locker; Ok(()) }
    /// ```
    pub fn drift_floor(mut self, floor: Duration) -> Self {
        self.drift.floor = floor;
        self
    }

    /// How often kept-alive leases are renewed, as a share of their TTL: the
    /// default, 1/3, renews a 30 s lease every 10 s, leaving two more tries
    /// before it would run out. Must be in `(0, 0.9]`, and the first
    /// renewal must come before the lease is reported lost (TTL minus twice
    /// the drift allowance): [`build`](crate::LockerBuilder::build) checks
    /// that for the default TTL, and a kept-alive acquire checks, for its
    /// own TTL, that the renewal is also answered within the node timeout
    /// by then.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// let locker = redlease::Locker::builder(["redis://127.0.0.1:6379"])
    ///     .advanced(|a| a.renew_fraction(0.25))
    ///     .build()?;
    /// # let _ = locker; Ok(()) }
    /// ```
    pub fn renew_fraction(mut self, fraction: f64) -> Self {
        self.renew_fraction = fraction;
        self
    }

    /// How long a server that (re)started casts no "yes" vote on an
    /// acquire; `Duration::ZERO` turns the quarantine off.
    ///
    /// A Redis server without fsync'd persistence comes back from a crash
    /// or restart empty, and would grant again a lock it had granted to a
    /// holder whose lease is still valid: with a majority made of it and
    /// the nodes the holder did not reach, a second client would hold the
    /// lock too. redlease reads each server's `run_id` and uptime on every
    /// new connection (a restart always breaks the connection), and counts
    /// no "yes" from a server that has been up for less than this. Its
    /// writes are still made, undone and extended as usual; the failed
    /// vote is [`NodeErrorKind::Quarantined`](crate::NodeErrorKind::Quarantined)
    /// and says for how long yet.
    ///
    /// It must cover the longest TTL (plus drift) that any client of these
    /// servers uses, not only this Locker's: the default is this Locker's
    /// TTL plus its drift allowance, and a lock or extend asked for with a
    /// longer TTL is refused. At most [`MAX_TTL`](crate::MAX_TTL). When
    /// every server restarted at once (nothing can be held then), no lock
    /// can be taken until the quarantine is over. Turn it off only for
    /// servers that cannot lose a write they acknowledged (`appendonly
    /// yes` with `appendfsync always`, on storage
    /// every restart reloads), or that stay down for longer than the
    /// largest TTL after a crash. redlease does not skip it for a server
    /// whose settings say `appendfsync always`: they do not show that the
    /// process started from its predecessor's data (its append-only file
    /// may have been lost with a container or a disk), so only the
    /// operator can tell (see the crate docs, "Restarts, duplicated servers
    /// and clock jumps"). Cluster nodes are not covered:
    /// redis-rs reconnects each shard out of our sight (use durability and
    /// replicas there).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// // Other clients of these servers take locks for up to a minute.
    /// let locker = redlease::Locker::builder(["redis://127.0.0.1:6379"])
    ///     .advanced(|a| a.restart_quarantine(Duration::from_secs(61)))
    ///     .build()?;
    /// # let _ = locker; Ok(()) }
    /// ```
    pub fn restart_quarantine(mut self, quarantine: Duration) -> Self {
        self.quarantine = Some(quarantine);
        self
    }

    /// Whether to watch each server's clock (on by default). Every "yes"
    /// to an acquire carries a reading of the server's clock (the new
    /// key's `PEXPIRETIME`, or `TIME` in the acquire script); a server
    /// whose clock advanced further than our monotonic clock over the same
    /// interval, beyond the drift allowance (an NTP step, a restored VM),
    /// expired its keys that much early, so it casts no "yes" vote for the
    /// restart quarantine
    /// (at least the TTL plus drift), as if it had restarted. A jump is
    /// seen by a Locker that talked to the server before and after it; a
    /// Locker that first meets the server after the jump cannot tell.
    /// Cluster nodes are not watched.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// let locker = redlease::Locker::builder(["redis://127.0.0.1:6379"])
    ///     .advanced(|a| a.clock_jump_guard(false))
    ///     .build()?;
    /// # let _ = locker; Ok(()) }
    /// ```
    pub fn clock_jump_guard(mut self, on: bool) -> Self {
        self.clock_guard = on;
        self
    }

    /// With [`fencing`](crate::LockerBuilder::fencing) on: how long a
    /// lock's fencing counter survives without acquisitions before Redis
    /// deletes it (default 10 minutes, at least 1 s, at most
    /// [`MAX_TTL`](crate::MAX_TTL)). A counter that expired restarts
    /// from the server clock (in microseconds, cut to
    /// 100 ms), which is above every token handed out before as long as no
    /// node's clock steps back, or differs from another node's, by more
    /// than this minus 100 ms. [`build`](crate::LockerBuilder::build)
    /// refuses it with fencing off.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// let locker = redlease::Locker::builder(["redis://127.0.0.1:6379"])
    ///     .fencing(true)
    ///     .advanced(|a| a.fence_expiry(std::time::Duration::from_secs(24 * 3600)))
    ///     .build()?;
    /// # let _ = locker; Ok(()) }
    /// ```
    pub fn fence_expiry(mut self, expiry: Duration) -> Self {
        self.fence_expiry = Some(expiry);
        self
    }

    /// Whether each node that is one server (a fixed address, or the
    /// sentinels' primary) over plain TCP gets an express connection beside
    /// its main one (off by default). A request that finds it free writes
    /// and reads it on its own task, with no hand-off to the main
    /// connection's driver task: a lone caller's cycle on a quiet network
    /// is shorter and costs less CPU (docs/library.md, "Connections").
    ///
    /// Off by default because it pays under packet loss: one request at a
    /// time on a connection means a lost packet waits for TCP's
    /// retransmission timer (200 ms and up) where a busy pipeline recovers
    /// it sooner, and the fault soak with 2% loss took about half as many
    /// locks with it on. It also adds one connection per Locker and node.
    /// Turn it on for a latency-bound single caller on a clean network.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// let locker = redlease::Locker::builder(["redis://127.0.0.1:6379"])
    ///     .advanced(|a| a.express_connection(true))
    ///     .build()?;
    /// # let _ = locker; Ok(()) }
    /// ```
    pub fn express_connection(mut self, on: bool) -> Self {
        self.express = on;
        self
    }
}

/// The checks of [`LockerBuilder::build`](crate::LockerBuilder::build)
/// that concern these settings alone.
impl Advanced {
    /// The fencing counters' expiry, refused with fencing off or out of
    /// range.
    pub(super) fn checked_fence_expiry(&self, fencing: bool) -> Result<Duration, Error> {
        if self.fence_expiry.is_some() && !fencing {
            return Err(Error::invalid(
                "advanced.fence_expiry",
                "set with fencing off: no counter is kept to expire (turn fencing on)",
            ));
        }
        let expiry = self.fence_expiry.unwrap_or(Duration::from_secs(600));
        if expiry < Duration::from_secs(1) || expiry > MAX_TTL {
            return Err(Error::invalid(
                "advanced.fence_expiry",
                format!(
                    "{expiry:?} is not between 1 s and {MAX_TTL:?}: a counter restarted from \
                     the clock must start above the tokens before it"
                ),
            ));
        }
        Ok(expiry)
    }

    /// The renewal share, refused outside `(0, 0.9]`.
    pub(super) fn check_renew_fraction(&self) -> Result<(), Error> {
        if !(self.renew_fraction > 0.0 && self.renew_fraction <= 0.9) {
            return Err(Error::invalid(
                "advanced.renew_fraction",
                format!(
                    "{} is not in (0, 0.9]: renewals must come before the lease runs out",
                    self.renew_fraction
                ),
            ));
        }
        Ok(())
    }

    /// How long a server must stay out after a restart to cover a hold
    /// the servers keep for `held`: that plus its drift allowance.
    pub(super) fn covering(&self, held: Duration) -> Duration {
        held + self.drift.drift(held)
    }

    /// The restart quarantine for a Locker whose default TTL is `ttl` and
    /// lock-delay `lock_delay`: zero (off), or covering both plus drift.
    pub(super) fn checked_quarantine(
        &self,
        ttl: Duration,
        lock_delay: Duration,
    ) -> Result<Duration, Error> {
        let covered = self.covering(ttl + lock_delay);
        let quarantine = self.quarantine.unwrap_or(covered);
        if !quarantine.is_zero() && (quarantine < covered || quarantine > MAX_TTL) {
            return Err(Error::invalid(
                "advanced.restart_quarantine",
                format!(
                    "{quarantine:?} is not between the TTL{} plus drift ({covered:?}) and \
                     {MAX_TTL:?}: a server that restarted empty could grant again a lock \
                     still held",
                    if lock_delay.is_zero() {
                        ""
                    } else {
                        " and the lock-delay"
                    }
                ),
            ));
        }
        Ok(quarantine)
    }
}
