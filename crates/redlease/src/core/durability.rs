//! Durability across failover: how many replicas must acknowledge a lock's
//! writes. Pure: the setting and the judgement of `WAIT`'s answer.
//!
//! A Redis primary answers a write before its replicas have it. If it
//! fails and a replica that never received the lock key is promoted, the
//! lock is free on the new primary while its holder still believes it
//! holds it. With durability on, every write of a lease (the acquire, each
//! extend and each renewal) is followed, in the same round trip and on the
//! same server, by `WAIT replicas timeout`, which blocks until that many
//! replicas acknowledged everything written so far on the connection.
//!
//! What this does and does not give (as the `WAIT` documentation says, it
//! "does not make Redis a strongly consistent store"):
//! - **Ask for every replica.** A promoted replica that acknowledged has
//!   the key, but with `replicas` below the number of replicas that can be
//!   promoted, the promoted one may not be among those that acknowledged.
//!   Worse, during a Sentinel failover the replicas not promoted keep
//!   following the deposed primary for a moment (300 ms in the soak) and
//!   acknowledge the writes it still takes; they lose them when they move
//!   to the new primary. The soak's `sentinel-failover` scenario (2
//!   replicas) shows overlapping holders and fencing violations at every
//!   failover with `required(1)`, and none with `required(2)`. So set
//!   `replicas` to the number of replicas, and know that a failover or one
//!   replica down then stops new locks until the replicas are back.
//! - Acknowledged is not persisted: a replica that acknowledged and then
//!   restarted without persistence has lost it.
//! - A write that was not acknowledged in time is still on the primary; it
//!   is not rolled back. [`Durability::required`] therefore undoes a
//!   failed acquire (like any failed attempt) and treats an unacknowledged
//!   renewal as unconfirmed.
//! - With durability on (either mode), a lock is bound to the replication
//!   lineage of the server that took it: the scripts store the token with
//!   the server's `master_replid` and compare both. A promoted replica, or
//!   a primary that restarted without its data, has another lineage, so the
//!   lease's next renewal finds the lock not ours and reports the lease
//!   lost, even when the key came through (maybe with an older TTL than the
//!   holder counts on). A failover thus ends the durable leases of its
//!   primary rather than risking them; this costs one `INFO replication`
//!   inside each script call (the ACL user needs `+info` and `+wait`).
//! - A deposed primary that still takes writes (the seconds before it is
//!   told to follow the new one) has, once every other replica follows the
//!   new primary, none left to acknowledge them: with
//!   [`Durability::required`] for every replica, a lock taken there fails
//!   instead of being silently lost.
//! - Redis times a `WAIT` out at its next cron tick (every 100 ms with the
//!   default `hz 10`), so a `WAIT` may answer up to 100 ms late: the
//!   durability timeout plus 100 ms must fit in the node timeout, and
//!   [`build`](crate::LockerBuilder::build) refuses settings where it does
//!   not.

use std::time::Duration;

/// How late Redis may answer a `WAIT` that timed out: it checks blocked
/// clients' timeouts in its cron, every 100 ms with the default `hz 10`
/// (measured: `WAIT 1 50` with a paused replica answered after ~160 ms).
pub(crate) const WAIT_LATENESS: Duration = Duration::from_millis(100);

/// How many replicas must acknowledge a lease's writes, and what happens
/// when fewer do. Set with
/// [`LockerBuilder::durability`](crate::LockerBuilder::durability); the
/// module documentation above says what `WAIT` guarantees and what not.
///
/// ```
/// use std::time::Duration;
/// use redlease::Durability;
///
/// // Every acquire, extend and renewal must reach one replica within 50 ms.
/// let durable = Durability::required(1, Duration::from_millis(50));
/// assert_ne!(durable, Durability::off());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Durability {
    mode: Mode,
    fsync: bool,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Mode {
    #[default]
    Off,
    BestEffort {
        replicas: u32,
        timeout: Duration,
    },
    Required {
        replicas: u32,
        timeout: Duration,
    },
}

impl Durability {
    /// No `WAIT` (the default): a lease is as durable as its primary.
    pub const fn off() -> Durability {
        Durability {
            mode: Mode::Off,
            fsync: false,
        }
    }

    /// `WAIT replicas timeout` after every write; the acquire reports how
    /// many replicas acknowledged
    /// ([`Lease::replicas_acknowledged`](crate::Lease::replicas_acknowledged)),
    /// and fewer than asked is not an error.
    pub const fn best_effort(replicas: u32, timeout: Duration) -> Durability {
        Durability {
            mode: Mode::BestEffort { replicas, timeout },
            fsync: false,
        }
    }

    /// `WAIT replicas timeout` after every write, and a node whose write
    /// fewer replicas acknowledged in time does not count: an acquire
    /// without a quorum of such nodes fails (and is undone), an extend or
    /// renewal not acknowledged leaves the lease unconfirmed on that node.
    pub const fn required(replicas: u32, timeout: Duration) -> Durability {
        Durability {
            mode: Mode::Required { replicas, timeout },
            fsync: false,
        }
    }

    /// Waits for the append-only file too: `WAITAOF 1 replicas timeout`
    /// instead of `WAIT`, so a write counts once the primary and `replicas`
    /// replicas have fsynced it to their AOF, which survives their restart
    /// as well. Needs `appendonly yes` on the primary and the replicas, and
    /// Redis 7.2 or later (or Valkey 8); elsewhere every write fails with
    /// the server's error, which names the cause.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let on_disk = redlease::Durability::required(1, Duration::from_millis(100)).fsync();
    /// # let _ = on_disk;
    /// ```
    pub const fn fsync(mut self) -> Durability {
        self.fsync = true;
        self
    }

    /// Whether to wait for the AOF fsync (`WAITAOF`).
    pub(crate) fn fsynced(&self) -> bool {
        self.fsync
    }

    /// The `WAIT` to send after each write: replicas and timeout.
    pub(crate) fn wait(&self) -> Option<(u32, Duration)> {
        match self.mode {
            Mode::Off => None,
            Mode::BestEffort { replicas, timeout } | Mode::Required { replicas, timeout } => {
                Some((replicas, timeout))
            }
        }
    }

    /// Whether `acked` replicas are too few: `Some(wanted)` if they are and
    /// that fails the write.
    pub(crate) fn shortfall(&self, acked: u32) -> Option<u32> {
        match self.mode {
            Mode::Required { replicas, .. } if acked < replicas => Some(replicas),
            _ => None,
        }
    }

    /// Why this setting cannot work with requests bounded by
    /// `node_timeout`, if it cannot.
    pub(crate) fn check(&self, node_timeout: Duration) -> Result<(), String> {
        let Some((replicas, timeout)) = self.wait() else {
            return Ok(());
        };
        if replicas == 0 {
            return Err("durability needs at least 1 replica (use Durability::off())".into());
        }
        if timeout.is_zero() {
            return Err(
                "a durability timeout of 0 makes WAIT block for ever; give it a bound".into(),
            );
        }
        if timeout.saturating_add(WAIT_LATENESS) >= node_timeout {
            return Err(format!(
                "the durability timeout {timeout:?} plus {WAIT_LATENESS:?} must be shorter than \
                 the node timeout {node_timeout:?}, which bounds the write and its WAIT \
                 together (Redis times WAIT out at its next cron tick, up to 100 ms late; \
                 raise node_timeout or lower the durability timeout)"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn only_required_fails_a_short_write() {
        assert_eq!(Durability::off().wait(), None);
        assert_eq!(Durability::off().shortfall(0), None);
        let best = Durability::best_effort(2, 50 * MS);
        assert_eq!(best.wait(), Some((2, 50 * MS)));
        assert_eq!(best.shortfall(0), None);
        let required = Durability::required(2, 50 * MS);
        assert_eq!(required.shortfall(1), Some(2));
        assert_eq!(required.shortfall(2), None);
        assert_eq!(required.shortfall(3), None);
    }

    #[test]
    fn settings_that_cannot_work_are_refused() {
        assert!(Durability::off().check(MS).is_ok());
        assert!(Durability::required(1, 50 * MS).check(200 * MS).is_ok());
        let late = Durability::required(1, 50 * MS).check(150 * MS);
        assert!(late.unwrap_err().contains("cron tick"));
        let zero = Durability::required(0, 50 * MS).check(200 * MS);
        assert!(zero.unwrap_err().contains("at least 1 replica"));
        let forever = Durability::best_effort(1, Duration::ZERO).check(200 * MS);
        assert!(forever.unwrap_err().contains("for ever"));
        let endless = Durability::required(1, Duration::MAX).check(Duration::MAX);
        assert!(endless.unwrap_err().contains("must be shorter"));
        let too_long = Durability::required(1, 100 * MS).check(100 * MS);
        assert!(too_long
            .unwrap_err()
            .contains("must be shorter than the node timeout"));
    }
}
