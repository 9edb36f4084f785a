//! Release notifications: the release script PUBLISHes on a per-lock
//! channel, and waiters of a Locker hear it through one subscription
//! connection per node, shared by every waiter.
//!
//! Per lock name there is one SUBSCRIBE per node, however many tasks wait,
//! and it is dropped a moment after the last waiter leaves. Waiters queue
//! in arrival order and only the head is woken by a release, so one
//! release costs one retry in this process, not one per waiter (no
//! thundering herd), and the lock goes to waiters in turn (fairness within
//! the process). A waiter also listens on its Locker's own channel of each
//! name it waits for (see [`wait`](crate::coord::acquire::wait)), where a release
//! that hands it the name from the queue on the servers names it: it alone
//! is woken, and a handoff to a waiter that left is passed on.
//!
//! Waiters trust these notifications only while they can arrive: a node's
//! subscription counts from its confirmation until its connection breaks.
//! A waiter whose subscription stands on a quorum of nodes hears every
//! release that succeeds (the release runs on a quorum, and two quorums
//! share a node), so it need not poll (see [`RetryPolicy::fallback_delay`]).
//! A broken connection wakes the first waiter of every lock at once (a
//! release may have gone unheard), and the node task subscribes again
//! every second until the node confirms.
//!
//! [`RetryPolicy::fallback_delay`]: crate::core::retry::RetryPolicy::fallback_delay

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch, Notify};

use crate::coord::background::RuntimeTasks;
use crate::core::claim::Claim;
use crate::core::keys::LockKeys;
use crate::core::mode::{Hold, LockMode};
use crate::core::token::ReleaseId;
use crate::transport::node::Node;

mod node_task;
mod waiters;
use node_task::node_task;
pub(crate) use waiters::Waiters;

/// What a node's subscription task is asked to do, in order.
enum Command {
    Subscribe { channel: String, generation: u64 },
    Unsubscribe { channel: String },
}

/// How often a node task whose connection broke subscribes again, until
/// the node confirms. Waiters poll that node's lock meanwhile.
const RESUBSCRIBE_EVERY: Duration = Duration::from_secs(1);

/// How long a channel stays subscribed after its last waiter left: a
/// process that waits for the same lock again soon (contention comes in
/// runs) neither unsubscribes nor subscribes again, and a waiter that
/// got the lock costs no UNSUBSCRIBE if its Locker ends meanwhile.
const LINGER: Duration = Duration::from_secs(1);

/// Channels with waiters, shared by the waiters and the node tasks.
pub(crate) struct Notifier {
    quorum: usize,
    nodes: usize,
    channels: Mutex<HashMap<String, Channel>>,
    /// The node tasks, started by the first waiter.
    tasks: Mutex<Tasks>,
    next_id: AtomicU64,
}

/// One subscription task per node, on the runtime that started them.
struct Tasks {
    nodes: Vec<Arc<Node>>,
    timeout: Duration,
    senders: Vec<mpsc::UnboundedSender<Command>>,
    handles: RuntimeTasks,
    shut_down: bool,
}

impl Tasks {
    fn send(&self, command: impl Fn() -> Command) {
        for node in &self.senders {
            // A task that ended (runtime gone, shut down) drops its
            // commands; the next waiter starts a new one.
            let _ = node.send(command());
        }
    }
}

/// One waiter on a channel: its number, its wake-up, the mode it wants,
/// and whether it has a place in the lock's queue on the servers (see
/// `coord::turn`), where a release wakes it by its number.
struct Entry {
    id: u64,
    notify: Arc<Notify>,
    mode: LockMode,
    /// A waiter for a lock held alone by another task of this Locker: its
    /// place, not in line on the servers, which that task's release puts
    /// there where others wait (see [`Notifier::next_place`]).
    offered: Option<(Arc<str>, u64)>,
    /// On this Locker's own channel: the last release that handed the
    /// name to this waiter (a hash of its id), and from how many nodes.
    handed: (u64, usize),
}

/// The waiters of one lock name on one channel: the lock's release
/// channel, or this Locker's own channel of that lock, on which a handoff
/// names the waiter it wakes (`targeted`).
struct Channel {
    /// Tells a node's confirmation apart from one meant for an earlier
    /// subscription of the same name.
    generation: u64,
    /// Waiters in arrival order; a release wakes the front (see
    /// [`Channel::front`]), a handoff the waiter it names.
    waiters: VecDeque<Entry>,
    targeted: bool,
    /// A name's watchers' channel: every message wakes every watcher.
    watched: bool,
    /// Counts the times the channel was left empty: a lingering
    /// unsubscription goes ahead only if nobody came and went since.
    emptied: u64,
    /// On a Locker's own channel: the latest waiters that took the lock,
    /// whose handoffs may still arrive (a waiter woken by this Locker's
    /// own release takes the lock before its handoff message is read).
    took: VecDeque<u64>,
    /// Which nodes confirmed the SUBSCRIBE, and their connection has not
    /// broken since.
    confirmed: watch::Sender<Vec<bool>>,
    /// The latest release heard of: its id, from how many nodes, and
    /// whether a waiter already took the lock after it.
    release: Option<Release>,
    /// A waiter of this Locker took the lock after the latest release, and
    /// its lease is valid until then: the next in line need not look at the
    /// lock to learn when it is due to expire.
    taken_until: Option<Instant>,
}

struct Release {
    id: String,
    heard: usize,
    done: bool,
}

impl Notifier {
    /// Release notifications over `nodes`; the node tasks start with the
    /// first waiter.
    pub(crate) fn new(nodes: &[Arc<Node>], timeout: Duration) -> Arc<Notifier> {
        Arc::new(Notifier {
            quorum: crate::core::quorum::quorum(nodes.len()),
            nodes: nodes.len(),
            channels: Mutex::new(HashMap::new()),
            tasks: Mutex::new(Tasks {
                nodes: nodes.to_vec(),
                timeout,
                senders: Vec::new(),
                handles: RuntimeTasks::default(),
                shut_down: false,
            }),
            next_id: AtomicU64::new(0),
        })
    }

    fn tasks(&self) -> MutexGuard<'_, Tasks> {
        self.tasks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts the node tasks on the current runtime, or again if the
    /// runtime they ran on has ended (a test's or a short-lived CLI
    /// runtime), subscribing again to every channel with waiters. Called
    /// with the channels locked, so no command is sent meanwhile.
    fn ensure_running(self: &Arc<Self>, channels: &mut HashMap<String, Channel>) {
        let mut tasks = self.tasks();
        if tasks.handles.running() || tasks.shut_down {
            return;
        }
        tasks.handles.abort();
        tasks.senders.clear();
        for (index, node) in tasks.nodes.clone().into_iter().enumerate() {
            let (tx, rx) = mpsc::unbounded_channel();
            let weak = Arc::downgrade(self);
            let task = node_task(node, index, weak, rx, tasks.timeout);
            tasks.senders.push(tx);
            tasks.handles.spawn(task);
        }
        for (name, channel) in channels.iter_mut() {
            channel.confirmed.send_modify(|nodes| nodes.fill(false));
            tasks.send(|| Command::Subscribe {
                channel: name.clone(),
                generation: channel.generation,
            });
        }
    }

    /// Stops the node tasks for good and wakes every waiter (they find the
    /// Locker closed).
    pub(crate) fn shutdown(&self) {
        let channels = self.channels();
        let mut tasks = self.tasks();
        tasks.shut_down = true;
        tasks.handles.abort();
        tasks.senders.clear();
        for channel in channels.values() {
            for entry in &channel.waiters {
                entry.notify.notify_one();
            }
        }
    }

    fn channels(&self) -> MutexGuard<'_, HashMap<String, Channel>> {
        // A panic while holding this lock leaves plain bookkeeping behind;
        // carrying on is better than poisoning every later waiter.
        self.channels.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether tasks of this process already wait for `channel`: a newcomer
    /// then queues behind them instead of barging in.
    pub(crate) fn has_waiters(&self, channel: &str) -> bool {
        self.channels()
            .get(channel)
            .is_some_and(|c| !c.waiters.is_empty())
    }

    /// A number no other waiter of this Locker has.
    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// The place of the first waiter on `channel` (a lock's release
    /// channel), if it waits in this process for another task of this
    /// Locker to release the lock, out of line on the servers: that
    /// release puts it in line where others wait, at its arrival.
    pub(crate) fn next_place(&self, channel: &str) -> Option<(Arc<str>, u64)> {
        let channels = self.channels();
        channels.get(channel)?.waiters.front()?.offered.clone()
    }

    /// A watcher of `channel` (a name's watchers' channel, see
    /// [`changed_channel`](crate::core::keys::changed_channel)): woken
    /// by every message on it, and whenever a node's subscription broke
    /// (a message may have gone unheard).
    pub(crate) fn watch(self: &Arc<Self>, channel: &str) -> Waiter {
        let id = self.next_id();
        self.join_as(channel, LockMode::Exclusive, id, Kind::Watch)
    }

    /// Queues waiter `id` on `channel` as `kind` says, subscribing on
    /// every node if it is the first.
    fn join_as(self: &Arc<Self>, channel: &str, mode: LockMode, id: u64, kind: Kind) -> Waiter {
        let notify = Arc::new(Notify::new());
        let mut channels = self.channels();
        self.ensure_running(&mut channels);
        let entry = channels.entry(channel.to_string()).or_insert_with(|| {
            self.tasks().send(|| Command::Subscribe {
                channel: channel.to_string(),
                generation: id,
            });
            Channel {
                generation: id,
                waiters: VecDeque::new(),
                targeted: kind == Kind::Own,
                watched: kind == Kind::Watch,
                emptied: 0,
                took: VecDeque::new(),
                confirmed: watch::Sender::new(vec![false; self.nodes]),
                release: None,
                taken_until: None,
            }
        });
        entry.waiters.push_back(Entry {
            id,
            notify: notify.clone(),
            mode,
            offered: None,
            handed: (0, 0),
        });
        Waiter {
            notifier: self.clone(),
            channel: channel.to_string(),
            id,
            notify,
            kind,
            confirmed: entry.confirmed.subscribe(),
            acquired: None,
        }
    }

    /// Our own release of `channel` is on its way (called as soon as it is
    /// written to every node's connection) or succeeded (called again when
    /// answered): wake the head waiter now, without waiting for Redis to
    /// echo a PUBLISH. Woken early, the head's acquire queues behind the
    /// release on the same connections, so Redis runs it right after the
    /// release instead of a round trip later; should it still be refused
    /// (the release was resent, or failed), the second call wakes the head
    /// again. Once a waiter took the lock on this release, the second call
    /// changes nothing: the lock is held again, until `taken_until`.
    /// `release_id` is asked for only if a task waits for `channel`.
    pub(crate) fn released(&self, channel: &str, release_id: impl FnOnce() -> ReleaseId) {
        let mut channels = self.channels();
        if let Some(c) = channels.get_mut(channel) {
            let release_id = release_id();
            let release_id = release_id.as_str();
            match &c.release {
                Some(r) if r.id == release_id && r.done => return,
                Some(r) if r.id == release_id => {}
                _ => {
                    c.release = Some(Release {
                        id: release_id.to_string(),
                        heard: usize::MAX,
                        done: false,
                    })
                }
            }
            c.taken_until = None;
            // A queued waiter at the front is most likely the first in
            // the lock's queue too: its acquire, behind the release, takes
            // the lock the release hands it. (If another process's waiter
            // is first, it is refused, and waits on.)
            c.wake_head();
        }
    }

    /// A node published a release of `channel`. The head waiter wakes at the
    /// first node's word (the lock may already be free on a quorum) and
    /// again when a quorum of nodes confirmed, in case its first try raced
    /// a release still on its way to some nodes.
    ///
    /// On this Locker's own channel of a lock, a handoff names the waiter
    /// it is for (`ID:WINDOW:RELEASE:HOLD`). A handoff to a waiter no longer
    /// here (it gave up, or took the lock on a quorum of other nodes) is
    /// returned as that waiter's place (`TAG:ID:WINDOW`) and claim, to be passed on.
    fn published(&self, channel: &str, payload: &str) -> Option<(Claim, String)> {
        let quorum = self.quorum;
        let mut channels = self.channels();
        let Some(c) = channels.get_mut(channel) else {
            return handed_to(channel, payload);
        };
        if c.watched {
            c.wake_all();
            return None;
        }
        let (waiter, release_id) = match c.targeted {
            true => match payload.splitn(4, ':').collect::<Vec<_>>()[..] {
                [id, _, release, ..] => (Some(id.parse::<u64>().ok()?), release),
                _ => return None,
            },
            false => (None, payload),
        };
        if let Some(id) = waiter {
            let Some(entry) = c.waiters.iter_mut().find(|e| e.id == id) else {
                if c.took.contains(&id) {
                    return None;
                }
                return handed_to(channel, payload);
            };
            // Counted per waiter: one release hands the name to several
            // waiters at once (readers, permits), each on every node. It
            // wakes at the first node's handoff and again at a quorum's,
            // in case its first try raced a release still on its way.
            let release = {
                use std::hash::{Hash, Hasher};
                let mut h = std::collections::hash_map::DefaultHasher::new();
                release_id.hash(&mut h);
                h.finish()
            };
            let heard = match entry.handed {
                (r, n) if r == release => n.saturating_add(1),
                _ => 1,
            };
            entry.handed = (release, heard);
            if heard == 1 || heard == quorum {
                entry.notify.notify_one();
            }
            return None;
        }
        let release = match &mut c.release {
            Some(r) if r.id == release_id => r,
            slot => {
                c.taken_until = None;
                slot.insert(Release {
                    id: release_id.to_string(),
                    heard: 0,
                    done: false,
                })
            }
        };
        release.heard = release.heard.saturating_add(1);
        if !release.done && (release.heard == 1 || release.heard == quorum) {
            c.wake_head();
        }
        None
    }

    /// Node `node` confirmed the subscription to `channel`.
    fn confirmed(&self, channel: &str, generation: u64, node: usize) {
        if let Some(c) = self.channels().get_mut(channel)
            && c.generation == generation
        {
            c.confirmed
                .send_if_modified(|nodes| !std::mem::replace(&mut nodes[node], true));
        }
    }

    /// Node `node`'s subscription connection broke: it confirms nothing
    /// until it subscribes again, and a release it announced meanwhile went
    /// unheard, so the first waiter of every lock looks at once.
    fn disconnected(&self, node: usize) {
        for c in self.channels().values_mut() {
            c.confirmed
                .send_if_modified(|nodes| std::mem::replace(&mut nodes[node], false));
            // A forced release may have gone unheard too: look. A handoff
            // names one waiter, so every waiter of a Locker's own channel
            // looks.
            c.taken_until = None;
            match c.targeted || c.watched {
                true => c.wake_all(),
                false => c.wake_head(),
            }
        }
    }

    /// Waiter `id` leaves the queue: `acquired` with its lease's validity
    /// if it took the lock alone (a reader that took a read hold leaves
    /// as one that gave up: the lock is not closed to the next in line).
    fn leave(self: &Arc<Self>, channel: &str, id: u64, acquired: Option<Instant>) {
        let mut channels = self.channels();
        let Some(c) = channels.get_mut(channel) else {
            return;
        };
        let was_front = c.front().any(|e| e.id == id);
        c.waiters.retain(|e| e.id != id);
        if c.targeted && acquired.is_some() {
            const REMEMBERED: usize = 16;
            if c.took.len() == REMEMBERED {
                c.took.pop_front();
            }
            c.took.push_back(id);
        }
        if let Some(valid_until) = acquired.filter(|_| !c.targeted) {
            // This release is used up: later echoes of it must not wake the
            // next waiter for a lock that is now ours.
            if let Some(r) = &mut c.release {
                r.done = true;
            }
            c.taken_until = Some(valid_until);
            // The next waiter moves up: it needs a timer for the new
            // holder's expiry (waiters behind the first keep none), which
            // `taken_until` gives without a look at the lock.
            c.wake_head();
        } else if was_front && !c.targeted && !c.watched {
            // A waiter at the front gave up (dropped, out of time), and may
            // have swallowed a wake-up, or took a read hold (the next in
            // line may be a writer, which must now look): pass it on.
            c.wake_head();
        }
        if c.waiters.is_empty() {
            c.emptied += 1;
            let emptied = c.emptied;
            let notifier = Arc::downgrade(self);
            let channel = channel.to_string();
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    runtime.spawn(async move {
                        tokio::time::sleep(LINGER).await;
                        if let Some(n) = notifier.upgrade() {
                            n.unsubscribe_if_idle(&channel, emptied);
                        }
                    });
                }
                Err(_) => {
                    drop(channels);
                    self.unsubscribe_if_idle(&channel, emptied);
                }
            }
        }
    }

    /// Unsubscribes from `channel` if nobody has waited on it since it was
    /// left empty for the `emptied`th time.
    fn unsubscribe_if_idle(&self, channel: &str, emptied: u64) {
        let mut channels = self.channels();
        if channels
            .get(channel)
            .is_some_and(|c| c.waiters.is_empty() && c.emptied == emptied)
        {
            channels.remove(channel);
            self.tasks().send(|| Command::Unsubscribe {
                channel: channel.to_string(),
            });
        }
    }
}

impl Channel {
    /// The waiters a release lets try: the first in line, and if it
    /// wants a read hold, every reader after it up to the first writer
    /// (readers share the lock, so they go together).
    fn front(&self) -> impl Iterator<Item = &Entry> {
        let shared = self
            .waiters
            .front()
            .is_some_and(|e| e.mode == LockMode::Shared);
        let run = match shared {
            true => self
                .waiters
                .iter()
                .take_while(|e| e.mode == LockMode::Shared)
                .count(),
            false => 1,
        };
        self.waiters.iter().take(run)
    }

    /// Wakes every waiter (or watcher).
    fn wake_all(&self) {
        self.waiters.iter().for_each(|e| e.notify.notify_one());
    }

    /// Wakes the front.
    fn wake_head(&self) {
        for entry in self.front() {
            // Stores a permit if the waiter is busy retrying: not lost.
            entry.notify.notify_one();
        }
    }
}

/// A place in the queue of one lock name. Leaves the queue (and, if last,
/// unsubscribes) when dropped, so a cancelled wait leaks nothing.
pub(crate) struct Waiter {
    notifier: Arc<Notifier>,
    channel: String,
    id: u64,
    notify: Arc<Notify>,
    kind: Kind,
    confirmed: watch::Receiver<Vec<bool>>,
    /// The validity of the lease it took, if it took the lock.
    acquired: Option<Instant>,
}

impl Waiter {
    /// Waits until every node confirmed the subscription, at most
    /// `timeout`: a release published before that would go unheard, and a
    /// handoff from a queue there would pass the waiter over. (Past the
    /// timeout, a quorum is what the waiter's hearing rests on.)
    pub(crate) async fn subscribed(&mut self, timeout: Duration) {
        let every = |nodes: &Vec<bool>| nodes.iter().all(|&c| c);
        let _ = tokio::time::timeout(timeout, self.confirmed.wait_for(every)).await;
    }

    /// Whether every release that succeeds will be heard: the subscription
    /// stands on a quorum of nodes.
    pub(crate) fn heard(&self) -> bool {
        confirmations(&self.confirmed.borrow()) >= self.notifier.quorum
    }

    /// Whether this waiter is at the front of the line: first, or a
    /// reader among the readers first in line.
    pub(crate) fn is_head(&self) -> bool {
        let channels = self.notifier.channels();
        channels
            .get(&self.channel)
            .is_some_and(|c| c.front().any(|e| e.id == self.id))
    }

    /// Resolves when a release wakes this waiter (only ever at the front).
    pub(crate) async fn woken(&self) {
        self.notify.notified().await;
    }

    /// Leaves the queue because the lock is ours alone, with a lease
    /// valid until `valid_until`. (A reader that took a read hold just
    /// leaves: dropped.)
    pub(crate) fn acquired(mut self, valid_until: Instant) {
        self.acquired = Some(valid_until);
    }

    /// Until when a lease another waiter of this Locker took after the
    /// latest release is valid, if one did: unless a release is heard
    /// (which clears this), the lock is held until then.
    pub(crate) fn taken_until(&self) -> Option<Instant> {
        let channels = self.notifier.channels();
        channels.get(&self.channel).and_then(|c| c.taken_until)
    }
}

/// The lock key and the place a handoff on a Locker's own channel of a
/// lock (`KEY:released:TAG`, payload `ID:WINDOW:RELEASE:HOLD`) was for, if it
/// is one.
fn handed_to(channel: &str, payload: &str) -> Option<(Claim, String)> {
    let (rest, tag) = channel.rsplit_once(':')?;
    let key = rest.strip_suffix(":released")?;
    let mut fields = payload.splitn(4, ':');
    let (id, window) = (fields.next()?, fields.next()?);
    fields.next()?;
    let hold = Hold::parse(fields.next()?)?;
    let keys = LockKeys {
        lock: key.into(),
        fence_expiry_ms: 0,
    };
    Some((Claim::one(keys, hold), format!("{tag}:{id}:{window}")))
}

/// How a waiter is on a channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// On a lock's release channel: woken at the front by a release.
    Released,
    /// Queued on the servers, on this Locker's own channel of the lock:
    /// woken by a handoff that names it.
    Own,
    /// On a name's watchers' channel: woken by every message.
    Watch,
}

/// How many nodes confirm a subscription.
fn confirmations(nodes: &[bool]) -> usize {
    nodes.iter().filter(|&&confirmed| confirmed).count()
}

impl Drop for Waiter {
    fn drop(&mut self) {
        self.notifier.leave(&self.channel, self.id, self.acquired);
    }
}

#[cfg(test)]
mod tests {
    use super::{handed_to, Kind, Notifier, Waiters};
    use crate::core::mode::LockMode;
    use std::time::Duration;

    /// Two waiters that join at once may stand in one order on a name's
    /// release channel and in the other on this Locker's own channel of
    /// it: the first on the release channel is still the one at the front
    /// (before, neither was, and both slept until their timers).
    #[tokio::test]
    async fn the_front_is_the_release_channels_whatever_the_own_channels_order() {
        let notifier = Notifier::new(&[], Duration::from_secs(1));
        let (released, own) = ("app:{job}:released", "app:{job}:released:0a1b");
        let a_released = notifier.join_as(released, LockMode::Exclusive, 1, Kind::Released);
        let b_released = notifier.join_as(released, LockMode::Exclusive, 2, Kind::Released);
        let b_own = notifier.join_as(own, LockMode::Exclusive, 2, Kind::Own);
        let a_own = notifier.join_as(own, LockMode::Exclusive, 1, Kind::Own);
        let a = Waiters(vec![a_released, a_own]);
        let b = Waiters(vec![b_released, b_own]);
        assert!(a.is_head());
        assert!(!b.is_head());
        drop(a);
        assert!(b.is_head());
    }

    /// One release hands a name to several waiters at once (readers),
    /// each by a message of its own: every one of them wakes. (Counted
    /// per channel, the second message of a release woke nobody on one
    /// node, and its waiter slept until its next look, up to a second.)
    #[tokio::test]
    async fn one_release_wakes_every_waiter_it_hands_the_name_to() {
        let notifier = Notifier::new(&[], Duration::from_secs(1));
        let own = "app:{job}:released:0a1b";
        let a = notifier.join_as(own, LockMode::Shared, 1, Kind::Own);
        let b = notifier.join_as(own, LockMode::Shared, 2, Kind::Own);
        assert!(notifier.published(own, "1:250:beef:r").is_none());
        assert!(notifier.published(own, "2:250:beef:r").is_none());
        for w in [&a, &b] {
            let woken = tokio::time::timeout(Duration::from_millis(100), w.woken()).await;
            assert!(woken.is_ok(), "waiter {} slept through its handoff", w.id);
        }
    }

    #[test]
    fn a_handoff_names_its_lock_place_and_hold() {
        use crate::core::mode::Hold;
        let (claim, place) = handed_to("app:{job}:released:0a1b", "7:250:abcdef:w").unwrap();
        assert_eq!(
            (&**claim.key(), place.as_str()),
            ("app:{job}", "0a1b:7:250")
        );
        assert_eq!(claim.hold(), Hold::Exclusive);
        let (claim, _) = handed_to("app:{job}:released:0a1b", "7:250:abcdef:p5:2").unwrap();
        assert!(matches!(claim.hold(), Hold::Permit { weight, .. } if weight.get() == 2));
        // A release announced to every waiter names no place.
        assert!(handed_to("app:{job}:released", "abcdef").is_none());
        assert!(handed_to("app:{job}:released:0a1b", "7:250").is_none());
        assert!(handed_to("app:{job}:released:0a1b", "7:250:abcdef:x").is_none());
    }
}
