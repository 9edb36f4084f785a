//! What the nodes say about one lock, for [`Admin::inspect`], and how to
//! read it. Pure: no I/O.
//!
//! [`Admin::inspect`]: crate::Admin::inspect

use std::time::Duration;

use crate::core::leader::{Leader, LeaderRecord};
use crate::core::mode::LockMode;
use crate::core::node_error::{NodeError, NodeId, Quarantine};
use crate::core::owner::Holder;
use crate::core::quorum::quorum;

/// A lock key's state on one node. Never the key's value: that is the
/// holder's token.
///
/// ```
/// use redlease::KeyState;
/// fn show(state: KeyState) -> String {
///     match state {
///         KeyState::Free => "free".into(),
///         KeyState::Held { expires_in: Some(left) } => format!("held, {left:?} left"),
///         KeyState::Held { expires_in: None } => "held forever (not written by redlease)".into(),
///     }
/// }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyState {
    /// No key.
    Free,
    /// A key exists.
    Held {
        /// Its remaining TTL; `None` when it never expires (someone wrote
        /// it without a TTL: not redlease).
        expires_in: Option<Duration>,
    },
}

/// One node's answer about a lock.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeLockState {
    /// The lock key.
    pub key: KeyState,
    /// The lock's fencing counter there: the highest token handed out
    /// through this node (`None`: no acquisition within the counter's
    /// expiry).
    pub fencing_counter: Option<u64>,
    /// Clients subscribed to the lock's release channel: one per process
    /// (Locker) waiting for it, however many of its tasks wait.
    pub waiting: u64,
    /// Whether the node's server casts no "yes" on an acquire now, and for
    /// how long yet: it (re)started less than the
    /// [restart quarantine](crate::Advanced::restart_quarantine) ago,
    /// or its clock jumped. Judged by the inspecting Locker's settings
    /// from what its connection learned when it reached the server (no
    /// extra request); on a cluster, the server of the lock's shard.
    ///
    /// ```
    /// # fn f(state: &redlease::NodeLockState) {
    /// use redlease::Quarantine;
    /// match state.quarantine {
    ///     Some(q) => match q.cause {
    ///         Quarantine::Restarted { up } => {
    ///             println!("restarted {up:?} ago, votes again in {:?}", q.left)
    ///         }
    ///         _ => println!("quarantined for {:?} more", q.left),
    ///     },
    ///     None => println!("votes"),
    /// }
    /// # }
    /// ```
    pub quarantine: Option<NodeQuarantine>,
    /// Who holds the key: a writer ([`LockMode::Exclusive`], or a value
    /// that is not a lock's) or readers ([`LockMode::Shared`]); `None`
    /// when free.
    pub mode: Option<LockMode>,
    /// Live readers there, or a semaphore's live permit holders, by the
    /// server's clock (0 unless readers or permits hold).
    pub readers: u64,
    /// A semaphore's number of permits, while any is held there
    /// ([`LockMode::Permit`]).
    pub permits: Option<u32>,
    /// A waiter that wants the name alone (a writer, or a set that writes
    /// it) stands in the name's queue, and readers who come after it wait
    /// behind it (see [`Locker::write_lock`](crate::Locker::write_lock)).
    pub writer_waits: bool,
    /// The key is reserved for a queued waiter that wants it alone: its
    /// turn came, and it has the waiter's handoff window to take it (a
    /// set of names keeps it while it waits for its next name; see
    /// [`Locker::lock_all`](crate::Locker::lock_all)). Held by no one yet,
    /// and taken by no one else until that waiter has it or gives up.
    pub reserved: bool,
    /// Who holds it there: the holder alone, or each reader or permit
    /// holder (of a set, its 1,000 members that expire last), with its owner label
    /// and since when ([`LockerBuilder::owner`](crate::LockerBuilder::owner)).
    /// Never a token.
    pub holders: Vec<Holder>,
    /// Waiters in the name's queue there, in every mode.
    pub queued: u64,
    /// The leader record of the election on this name, while the lease
    /// that wrote it holds the name there ([`Election`](crate::Election)).
    pub leader: Option<LeaderRecord>,
}

/// A node whose "yes" to an acquire does not count yet
/// ([`NodeLockState::quarantine`]); an acquire meets it as
/// [`NodeErrorKind::Quarantined`](crate::NodeErrorKind::Quarantined).
///
/// ```
/// fn votes_again_in(q: &redlease::NodeQuarantine) -> std::time::Duration {
///     q.left
/// }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeQuarantine {
    /// Why.
    pub cause: Quarantine,
    /// How long it is quarantined for yet.
    pub left: Duration,
}

impl NodeQuarantine {
    pub(crate) fn new(cause: Quarantine, left: Duration) -> Self {
        NodeQuarantine { cause, left }
    }
}

/// What the nodes say about one lock, from [`Admin::inspect`].
///
/// [`Admin::inspect`]: crate::Admin::inspect
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct LockStatus {
    /// The resource name.
    pub resource: String,
    /// Its Redis key.
    pub key: String,
    /// Each node's answer, in the Locker's node order.
    pub nodes: Vec<(NodeId, Result<NodeLockState, NodeError>)>,
}

/// What a watcher compares of two looks at a name
/// ([`LockStatus::summary`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Summary {
    verdict: (usize, usize),
    mode: Option<LockMode>,
    holders: Vec<(Holder, bool)>,
    counts: (u64, Option<u32>, u64, u64),
    leader: Option<Leader>,
}

/// Whether a lock is held, judged as an acquire would find it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// A quorum of nodes has the key.
    Held {
        /// How many nodes have it.
        on: usize,
        /// Until the lock is free unless renewed or released: the
        /// quorum-th longest remaining TTL (`None`: a key without expiry
        /// keeps it held).
        for_at_most: Option<Duration>,
    },
    /// A quorum of nodes has no key. Keys on a minority are left over from
    /// a failed attempt or an ending lease, and expire by themselves.
    Free {
        /// Nodes with a leftover key.
        leftover_on: usize,
    },
    /// A quorum of nodes has no key, but too few of them may vote "yes"
    /// yet: the others are quarantined (see
    /// [`NodeLockState::quarantine`]). An acquire fails until enough of
    /// them vote again.
    Quarantined {
        /// How long until enough free nodes vote for a quorum, if the
        /// nodes stay as they are.
        takeable_in: Duration,
        /// How many free nodes are quarantined.
        quarantined: usize,
        /// Nodes with a leftover key.
        leftover_on: usize,
    },
    /// Too few nodes answered to tell.
    Unknown {
        /// How many answered.
        answered: usize,
        /// Of those, how many have the key.
        held_on: usize,
    },
}

impl LockStatus {
    /// Held when a quorum has the key, free when a quorum has not and may
    /// vote for a new holder: exactly the test an acquire would meet.
    /// Free but with too few nodes out of their restart quarantine is
    /// [`Verdict::Quarantined`].
    ///
    /// ```
    /// # fn f(status: &redlease::LockStatus) {
    /// use redlease::Verdict;
    /// match status.verdict() {
    ///     Verdict::Held { on, .. } => println!("held on {on} nodes"),
    ///     Verdict::Free { .. } => println!("free"),
    ///     Verdict::Quarantined { takeable_in, .. } => {
    ///         println!("free, but not takeable for {takeable_in:?}")
    ///     }
    ///     _ => println!("cannot tell: too few nodes answered"),
    /// }
    /// # }
    /// ```
    pub fn verdict(&self) -> Verdict {
        let nodes = self.nodes.len();
        let quorum = quorum(nodes);
        let answered: Vec<&NodeLockState> = self
            .nodes
            .iter()
            .filter_map(|(_, s)| s.as_ref().ok())
            .collect();
        // Remaining TTLs of the keys found, longest first (no expiry first).
        let mut left: Vec<Option<Duration>> = answered
            .iter()
            .filter_map(|s| match s.key {
                KeyState::Free => None,
                KeyState::Held { expires_in } => Some(expires_in),
            })
            .collect();
        left.sort_by_key(|d| std::cmp::Reverse(d.unwrap_or(Duration::MAX)));
        let held = left.len();
        let free = answered.len() - held;
        // What is left of the quarantines of the free nodes, shortest first.
        let mut quarantined: Vec<Duration> = answered
            .iter()
            .filter(|s| s.key == KeyState::Free)
            .filter_map(|s| s.quarantine.map(|q| q.left))
            .collect();
        quarantined.sort();
        let voting = free - quarantined.len();
        if held >= quorum {
            Verdict::Held {
                on: held,
                for_at_most: left[quorum - 1],
            }
        } else if voting >= quorum {
            Verdict::Free { leftover_on: held }
        } else if free >= quorum {
            Verdict::Quarantined {
                takeable_in: quarantined[quorum - voting - 1],
                quarantined: quarantined.len(),
                leftover_on: held,
            }
        } else {
            Verdict::Unknown {
                answered: answered.len(),
                held_on: held,
            }
        }
    }

    /// Who holds the name, as the nodes that answered tell: each holder
    /// once (the same lease on several nodes is one holder), in the order
    /// the nodes list them. Never a token.
    ///
    /// ```
    /// # fn f(status: &redlease::LockStatus) {
    /// let now = std::time::SystemTime::now();
    /// for holder in status.holders() {
    ///     println!("held by {}", holder.describe(now));
    /// }
    /// # }
    /// ```
    pub fn holders(&self) -> Vec<Holder> {
        let answered = self.nodes.iter().filter_map(|(_, a)| a.as_ref().ok());
        crate::core::owner::distinct(answered.flat_map(|state| &state.holders))
    }

    /// The election's leader, when a quorum of the nodes that answered
    /// shows one lease's leader record and that lease is not in its
    /// lock-delay: its value (the latest any of them shows), term and
    /// holder (see [`Election`](crate::Election)); `None` when nobody
    /// leads, or the name is no election's.
    ///
    /// ```
    /// # fn f(status: &redlease::LockStatus) {
    /// if let Some(leader) = status.leader() {
    ///     println!("led by {} in term {}", leader.value, leader.term);
    /// }
    /// # }
    /// ```
    pub fn leader(&self) -> Option<Leader> {
        let answers = self.answers().map(|s| {
            let alone = (s.mode == Some(LockMode::Exclusive)).then(|| s.holders.first());
            (s.leader.as_ref(), alone.flatten())
        });
        crate::core::leader::agreed(answers, quorum(self.nodes.len()))
    }

    /// How many waiters stand in the name's queue, in every mode: the most
    /// any node counts.
    ///
    /// ```
    /// # fn f(status: &redlease::LockStatus) {
    /// println!("{} in line", status.queued());
    /// # }
    /// ```
    pub fn queued(&self) -> u64 {
        self.answers().map(|s| s.queued).max().unwrap_or(0)
    }

    /// What a watcher compares to tell a change
    /// ([`Locker::watch`](crate::Locker::watch)): the verdict's kind and
    /// node count, the mode, the holders (and which are in their
    /// lock-delay), readers, permits, the queue, the waiting processes,
    /// and the leader; not the TTLs, which run down between looks.
    pub(crate) fn summary(&self) -> Summary {
        let verdict = match self.verdict() {
            Verdict::Held { on, .. } => (0, on),
            Verdict::Free { leftover_on } => (1, leftover_on),
            Verdict::Quarantined { leftover_on, .. } => (2, leftover_on),
            Verdict::Unknown { answered, held_on } => (3 + answered, held_on),
        };
        let holders: Vec<(Holder, bool)> = self
            .holders()
            .into_iter()
            .map(|h| {
                let delayed = h.in_lock_delay().is_some();
                (h.lasting(None), delayed)
            })
            .collect();
        Summary {
            verdict,
            mode: self.mode(),
            holders,
            counts: (
                self.readers(),
                self.permits(),
                self.queued(),
                self.waiting(),
            ),
            leader: self.leader(),
        }
    }

    /// The highest fencing counter any node reported: no token handed out
    /// so far is higher. (A node outside the last granting quorum may hold
    /// more than the last token, so the next token is higher than the last
    /// one but not always higher than this.)
    ///
    /// ```
    /// # fn f(status: &redlease::LockStatus) {
    /// if let Some(n) = status.fencing_counter() {
    ///     println!("last token handed out: {n}");
    /// }
    /// # }
    /// ```
    pub fn fencing_counter(&self) -> Option<u64> {
        self.answers().filter_map(|s| s.fencing_counter).max()
    }

    /// How many processes wait for the lock: each waiting Locker subscribes
    /// on every node it reaches, so this is the largest count on any node.
    ///
    /// ```
    /// # fn f(status: &redlease::LockStatus) {
    /// println!("{} processes waiting", status.waiting());
    /// # }
    /// ```
    pub fn waiting(&self) -> u64 {
        self.answers().map(|s| s.waiting).max().unwrap_or(0)
    }

    /// How the name is held when a quorum has its key: by readers, a
    /// writer, or a semaphore's permit holders, whichever most of those
    /// nodes say. `None` when it is not held on a quorum
    /// ([`verdict`](Self::verdict) says more).
    ///
    /// ```
    /// # fn f(status: &redlease::LockStatus) {
    /// match status.mode() {
    ///     Some(redlease::LockMode::Shared) => println!("{} readers", status.readers()),
    ///     Some(redlease::LockMode::Exclusive) => println!("a writer"),
    ///     Some(redlease::LockMode::Permit) => println!("{} permit holders", status.readers()),
    ///     Some(_) => println!("held"),
    ///     None => println!("not held"),
    /// }
    /// # }
    /// ```
    pub fn mode(&self) -> Option<LockMode> {
        let count = |mode| self.answers().filter(|s| s.mode == Some(mode)).count();
        let modes = [LockMode::Exclusive, LockMode::Shared, LockMode::Permit];
        let held: usize = modes.iter().map(|&m| count(m)).sum();
        if held < quorum(self.nodes.len()) {
            return None;
        }
        // The first of the most common: a writer's on a tie.
        modes.into_iter().rev().max_by_key(|&m| count(m))
    }

    /// A semaphore's number of permits, while any is held (the most any
    /// node reports); its holders are [`readers`](Self::readers).
    ///
    /// ```
    /// # fn f(status: &redlease::LockStatus) {
    /// if let Some(permits) = status.permits() {
    ///     println!("{} of {permits} permits held", status.readers());
    /// }
    /// # }
    /// ```
    pub fn permits(&self) -> Option<u32> {
        self.answers().filter_map(|s| s.permits).max()
    }

    /// How many readers hold the lock, or a semaphore's permits: the most
    /// any node counts (each holds on a quorum, not on every node).
    ///
    /// ```
    /// # fn f(status: &redlease::LockStatus) {
    /// println!("{} readers", status.readers());
    /// # }
    /// ```
    pub fn readers(&self) -> u64 {
        self.answers().map(|s| s.readers).max().unwrap_or(0)
    }

    /// Whether a waiter that wants the name alone (a writer) stands in its
    /// queue, on any node (readers who come after it wait behind it).
    ///
    /// ```
    /// # fn f(status: &redlease::LockStatus) {
    /// if status.writer_waits() {
    ///     println!("a writer waits; new readers queue behind it");
    /// }
    /// # }
    /// ```
    pub fn writer_waits(&self) -> bool {
        self.answers().any(|s| s.writer_waits)
    }

    /// Whether some node keeps the lock reserved for a queued waiter whose
    /// turn came (a set of names keeps it while it waits for its next
    /// name; see [`Locker::lock_all`](crate::Locker::lock_all)): the key
    /// is there, but no lease holds it yet.
    ///
    /// ```
    /// # fn f(status: &redlease::LockStatus) {
    /// if status.reserved() {
    ///     println!("reserved for the waiter whose turn came");
    /// }
    /// # }
    /// ```
    pub fn reserved(&self) -> bool {
        self.answers().any(|s| s.reserved)
    }

    fn answers(&self) -> impl Iterator<Item = &NodeLockState> {
        self.nodes.iter().filter_map(|(_, s)| s.as_ref().ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::node_error::NodeErrorKind;

    fn status(keys: &[Option<KeyState>]) -> LockStatus {
        LockStatus {
            resource: "r".into(),
            key: "redlease:{r}".into(),
            nodes: keys
                .iter()
                .enumerate()
                .map(|(i, k)| {
                    let id = NodeId::new(i, format!("n{i}"));
                    let answer = match k {
                        Some(key) => Ok(NodeLockState {
                            key: *key,
                            fencing_counter: Some(i as u64),
                            waiting: i as u64,
                            quarantine: None,
                            mode: match key {
                                KeyState::Free => None,
                                KeyState::Held { .. } => Some(LockMode::Exclusive),
                            },
                            readers: 0,
                            permits: None,
                            writer_waits: false,
                            reserved: false,
                            holders: Vec::new(),
                            queued: 0,
                            leader: None,
                        }),
                        None => Err(NodeError::new(
                            id.clone(),
                            NodeErrorKind::Timeout(Duration::from_millis(5)),
                        )),
                    };
                    (id, answer)
                })
                .collect(),
        }
    }

    fn held(secs: u64) -> Option<KeyState> {
        Some(KeyState::Held {
            expires_in: Some(Duration::from_secs(secs)),
        })
    }

    #[test]
    fn held_on_a_quorum_until_the_quorum_th_longest_ttl() {
        let s = status(&[held(9), held(3), held(7)]);
        assert_eq!(
            s.verdict(),
            Verdict::Held {
                on: 3,
                for_at_most: Some(Duration::from_secs(7))
            }
        );
        let forever = Some(KeyState::Held { expires_in: None });
        let s = status(&[forever, held(3), Some(KeyState::Free)]);
        assert_eq!(
            s.verdict(),
            Verdict::Held {
                on: 2,
                for_at_most: Some(Duration::from_secs(3))
            }
        );
        assert_eq!(
            status(&[forever]).verdict(),
            Verdict::Held {
                on: 1,
                for_at_most: None
            }
        );
    }

    #[test]
    fn free_on_a_quorum_and_unknown_without_one() {
        let free = Some(KeyState::Free);
        assert_eq!(
            status(&[held(9), free, free]).verdict(),
            Verdict::Free { leftover_on: 1 }
        );
        assert_eq!(
            status(&[held(9), None, None]).verdict(),
            Verdict::Unknown {
                answered: 1,
                held_on: 1
            }
        );
    }

    /// Node `i` quarantined for `secs` more.
    fn quarantine(mut s: LockStatus, i: usize, secs: u64) -> LockStatus {
        if let Ok(state) = &mut s.nodes[i].1 {
            state.quarantine = Some(NodeQuarantine::new(
                Quarantine::Restarted {
                    up: Duration::from_secs(1),
                },
                Duration::from_secs(secs),
            ));
        }
        s
    }

    #[test]
    fn free_but_too_few_voters_is_quarantined_until_enough_vote() {
        let free = Some(KeyState::Free);
        // One quarantined node of three leaves a quorum of voters.
        let s = quarantine(status(&[free, free, free]), 0, 20);
        assert_eq!(s.verdict(), Verdict::Free { leftover_on: 0 });
        // Two of three: takeable when the first of them votes again...
        let s = quarantine(quarantine(status(&[free, free, free]), 0, 20), 1, 8);
        assert_eq!(
            s.verdict(),
            Verdict::Quarantined {
                takeable_in: Duration::from_secs(8),
                quarantined: 2,
                leftover_on: 0
            }
        );
        // ...or both, when the third has a leftover key.
        let s = quarantine(quarantine(status(&[free, free, held(5)]), 0, 20), 1, 8);
        assert_eq!(
            s.verdict(),
            Verdict::Quarantined {
                takeable_in: Duration::from_secs(20),
                quarantined: 2,
                leftover_on: 1
            }
        );
        // All three: a quorum needs the two shortest quarantines over.
        let mut s = status(&[free, free, free]);
        for (i, secs) in [(0, 30), (1, 10), (2, 20)] {
            s = quarantine(s, i, secs);
        }
        assert_eq!(
            s.verdict(),
            Verdict::Quarantined {
                takeable_in: Duration::from_secs(20),
                quarantined: 3,
                leftover_on: 0
            }
        );
        // A quarantined node's key still holds the lock there.
        let s = quarantine(quarantine(status(&[held(9), held(9), free]), 0, 5), 1, 5);
        assert!(matches!(s.verdict(), Verdict::Held { on: 2, .. }));
        // One node: its own quarantine.
        let s = quarantine(status(&[free]), 0, 3);
        assert_eq!(
            s.verdict(),
            Verdict::Quarantined {
                takeable_in: Duration::from_secs(3),
                quarantined: 1,
                leftover_on: 0
            }
        );
    }

    #[test]
    fn counter_and_waiters_are_the_largest_any_node_reported() {
        let s = status(&[held(1), None, held(1)]);
        assert_eq!(s.fencing_counter(), Some(2));
        assert_eq!(s.waiting(), 2);
    }
}
