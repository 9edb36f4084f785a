//! Release notifications: the release script PUBLISHes on a per-lock
//! channel, and waiters of a Locker hear it through one subscription
//! connection per node, shared by every waiter.
//!
//! Per lock name there is one SUBSCRIBE per node, however many tasks wait,
//! and it is dropped a moment after the last waiter leaves. Waiters queue
//! in arrival order and only the head is woken by a release, so one
//! release costs one retry in this process, not one per waiter (no
//! thundering herd), and the lock goes to waiters in turn (fairness within
//! the process). An exclusive waiter that queues on the servers (see
//! [`turn`](crate::coord::turn)) also listens on its Locker's own channel
//! of the lock, where a release that hands it the lock names it: it alone
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
use crate::core::mode::LockMode;
use crate::core::token::ReleaseId;
use crate::transport::node::Node;

mod node_task;
use node_task::node_task;

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
    queued: bool,
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

    /// Queues a waiter for `mode` on `channel`, subscribing on every node
    /// if it is the first.
    pub(crate) fn join(self: &Arc<Self>, channel: &str, mode: LockMode) -> Waiter {
        let id = self.next_id();
        self.join_as(channel, mode, id, Kind::Plain)
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
            queued: kind != Kind::Plain,
        });
        Waiter {
            notifier: self.clone(),
            channel: channel.to_string(),
            id,
            notify,
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
            c.wake_head(true);
        }
    }

    /// A node published a release of `channel`. The head waiter wakes at the
    /// first node's word (the lock may already be free on a quorum) and
    /// again when a quorum of nodes confirmed, in case its first try raced
    /// a release still on its way to some nodes.
    ///
    /// On this Locker's own channel of a lock, a handoff names the waiter
    /// it is for (`ID:WINDOW:RELEASE`). A handoff to a waiter no longer
    /// here (it gave up, or took the lock on a quorum of other nodes) is
    /// returned as that waiter's place (`TAG:ID:WINDOW`), to be passed on.
    fn published(&self, channel: &str, payload: &str) -> Option<(String, String)> {
        let quorum = self.quorum;
        let mut channels = self.channels();
        let Some(c) = channels.get_mut(channel) else {
            return handed_to(channel, payload);
        };
        let (waiter, release_id) = match c.targeted {
            true => match payload.splitn(3, ':').collect::<Vec<_>>()[..] {
                [id, _, release] => (Some(id.parse::<u64>().ok()?), release),
                _ => return None,
            },
            false => (None, payload),
        };
        if let Some(id) = waiter {
            if !c.waiters.iter().any(|e| e.id == id) {
                if c.took.contains(&id) {
                    return None;
                }
                return handed_to(channel, payload);
            }
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
        match waiter {
            // Woken at the first node's handoff (the lock may be handed
            // on a quorum already), and again when a quorum did, in case
            // its first try raced a release still on its way elsewhere.
            Some(id) if release.heard == 1 || release.heard == quorum => {
                if let Some(entry) = c.waiters.iter().find(|e| e.id == id) {
                    entry.notify.notify_one();
                }
            }
            Some(_) => {}
            None if !release.done && (release.heard == 1 || release.heard == quorum) => {
                c.wake_head(true);
            }
            None => {}
        }
        None
    }

    /// Node `node` confirmed the subscription to `channel`.
    fn confirmed(&self, channel: &str, generation: u64, node: usize) {
        if let Some(c) = self.channels().get_mut(channel) {
            if c.generation == generation {
                c.confirmed
                    .send_if_modified(|nodes| !std::mem::replace(&mut nodes[node], true));
            }
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
            match c.targeted {
                true => c.waiters.iter().for_each(|e| e.notify.notify_one()),
                false => c.wake_head(true),
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
            c.wake_head(true);
        } else if was_front && !c.targeted {
            // A waiter at the front gave up (dropped, out of time), and may
            // have swallowed a wake-up, or took a read hold (the next in
            // line may be a writer, which must now look): pass it on.
            c.wake_head(true);
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

    /// Wakes the front; a queued waiter there only if `queued_too` (a
    /// release that hands the lock on wakes the waiter it goes to).
    fn wake_head(&self, queued_too: bool) {
        for entry in self.front().filter(|e| queued_too || !e.queued) {
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
    confirmed: watch::Receiver<Vec<bool>>,
    /// The validity of the lease it took, if it took the lock.
    acquired: Option<Instant>,
}

impl Waiter {
    /// Waits until a quorum of nodes confirmed the subscription, at most
    /// `timeout`: a release published before that would go unheard.
    pub(crate) async fn subscribed(&mut self, timeout: Duration) {
        let quorum = self.notifier.quorum;
        let on_quorum = |nodes: &Vec<bool>| confirmations(nodes) >= quorum;
        let _ = tokio::time::timeout(timeout, self.confirmed.wait_for(on_quorum)).await;
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

/// A place in the queues of every lock of a multi-lock (`lock_all`), or
/// of one lock: woken by a release of any of them, at the front when it
/// is at the front of each queue.
pub(crate) struct Waiters(Vec<Waiter>);

impl Waiters {
    /// Queues for `mode` on each of `channels`.
    pub(crate) fn join(notifier: &Arc<Notifier>, channels: &[String], mode: LockMode) -> Self {
        Waiters(channels.iter().map(|c| notifier.join(c, mode)).collect())
    }

    /// An exclusive waiter with place `id` in the lock's queue: on the
    /// lock's release channel `released` (a release that frees the lock
    /// wakes the front, which hands it on to the first in line if that is
    /// not itself), and on this Locker's own channel of the lock `own`,
    /// where a handoff wakes it by its number.
    pub(crate) fn join_queued(
        notifier: &Arc<Notifier>,
        released: &str,
        own: &str,
        id: u64,
    ) -> Self {
        let mode = LockMode::Exclusive;
        Waiters(vec![
            notifier.join_as(released, mode, id, Kind::Queued),
            notifier.join_as(own, mode, id, Kind::Own),
        ])
    }

    /// Waits until a quorum confirmed every subscription, at most
    /// `timeout` in all.
    pub(crate) async fn subscribed(&mut self, timeout: Duration) {
        let all = self.0.iter_mut().map(|w| w.subscribed(timeout));
        futures_util::future::join_all(all).await;
    }

    /// Whether every release that succeeds will be heard.
    pub(crate) fn heard(&self) -> bool {
        self.0.iter().all(Waiter::heard)
    }

    /// Its number in this Locker (a queued waiter's, on each channel).
    pub(crate) fn id(&self) -> u64 {
        self.0.first().map_or(0, |w| w.id)
    }

    /// Whether it is at the front of every queue.
    pub(crate) fn is_head(&self) -> bool {
        self.0.iter().all(Waiter::is_head)
    }

    /// Resolves when a release of any of the locks wakes it, with the
    /// index of the channel it was woken on (for a queued waiter, 1: a
    /// handoff named it).
    pub(crate) async fn woken(&self) -> usize {
        let all = self.0.iter().map(|w| Box::pin(w.woken()));
        futures_util::future::select_all(all).await.1
    }

    /// Leaves every queue because the locks are ours alone, valid until
    /// `valid_until`.
    pub(crate) fn acquired(self, valid_until: Instant) {
        for w in self.0 {
            w.acquired(valid_until);
        }
    }

    /// Until when a lease another waiter of this Locker took after the
    /// latest release of any of the locks is valid, the latest of them.
    pub(crate) fn taken_until(&self) -> Option<Instant> {
        self.0.iter().filter_map(Waiter::taken_until).max()
    }

    /// How long a lease that another task of this Locker took since the
    /// latest release stays valid, if one did and still is. Only for
    /// notified waiting, with the subscription confirmed on a quorum (so
    /// any other release of the lock, a forced one say, is heard and
    /// clears this); a policy that `counts_attempts` gets the attempts it
    /// asked for.
    pub(crate) fn taken_by_sibling(&self, counts_attempts: bool, now: Instant) -> Option<Duration> {
        if counts_attempts || !self.heard() {
            return None;
        }
        self.taken_until()
            .and_then(|until| until.checked_duration_since(now))
            .filter(|left| !left.is_zero())
    }
}

/// The lock key and the place a handoff on a Locker's own channel of a
/// lock (`KEY:released:TAG`, payload `ID:WINDOW:RELEASE`) was for, if it
/// is one.
fn handed_to(channel: &str, payload: &str) -> Option<(String, String)> {
    let (rest, tag) = channel.rsplit_once(':')?;
    let key = rest.strip_suffix(":released")?;
    let mut fields = payload.splitn(3, ':');
    let (id, window) = (fields.next()?, fields.next()?);
    fields.next()?;
    Some((key.to_string(), format!("{tag}:{id}:{window}")))
}

/// How a waiter is on a channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Woken at the front by releases.
    Plain,
    /// Queued on the servers, on the lock's release channel: woken at the
    /// front by a release that frees the lock, not by this Locker's own.
    Queued,
    /// Queued on the servers, on this Locker's own channel of the lock:
    /// woken by a handoff that names it.
    Own,
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
    use super::handed_to;

    #[test]
    fn a_handoff_names_its_lock_and_place() {
        let handed = handed_to("app:{job}:released:0a1b", "7:250:abcdef");
        assert_eq!(
            handed,
            Some(("app:{job}".to_string(), "0a1b:7:250".to_string()))
        );
        // A release announced to every waiter names no place.
        assert_eq!(handed_to("app:{job}:released", "abcdef"), None);
        assert_eq!(handed_to("app:{job}:released:0a1b", "7:250"), None);
    }
}
