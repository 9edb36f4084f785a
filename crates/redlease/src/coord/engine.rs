//! [`Engine`]: what a Locker, its clones and its leases share: the nodes,
//! the settings, the leases held, and the background services (renewal,
//! release notifications, requests finishing after a quorum answered).
//!
//! The services start on first use on the runtime of the task using them,
//! and start again on another runtime if the one they ran on has ended: they
//! follow the Locker, not the first runtime that touched it. They stop when
//! the last handle on the engine is dropped (the Locker and its leases), or
//! at [`Engine::close`].

use std::num::NonZeroU64;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use crate::coord::acquire::subscription::Notifier;
use crate::coord::background::Background;
use crate::coord::ownership::Ownership;
use crate::coord::release::{release_on, Announce};
use crate::coord::renew::Renewer;
use crate::core::error::Error;
use crate::core::keys::{lock_key, release_channel, LockKeys};
use crate::core::lease_state::LostReason;
use crate::core::mode::Hold;
use crate::core::retry::RetryPolicy;
use crate::core::slab::Slab;
use crate::core::telemetry;
use crate::core::token::{LockerTag, ReleaseId};
use crate::core::validity::{DriftModel, Timing, MAX_TTL};
use crate::transport::node::Node;

/// A Locker's settings, checked by its builder.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub(crate) ttl: Duration,
    pub(crate) node_timeout: Option<Duration>,
    pub(crate) connect_timeout: Duration,
    pub(crate) drift: DriftModel,
    pub(crate) retry: RetryPolicy,
    pub(crate) prefix: String,
    pub(crate) renew_fraction: f64,
    pub(crate) fence_expiry: Duration,
    /// Whether every acquire draws a fencing token.
    pub(crate) fencing: bool,
    pub(crate) durability: crate::core::durability::Durability,
    /// The restart quarantine (zero: off): no TTL (with the lock-delay)
    /// may outlast it.
    pub(crate) quarantine: Duration,
    /// How long a hold that ends without a release is kept past the
    /// lease's end (zero: off; see `Timing::hold_ms`).
    pub(crate) lock_delay: Duration,
    /// Begins every token this Locker hands out.
    pub(crate) tag: LockerTag,
    /// Who its leases say they are (a checked label).
    pub(crate) owner: Arc<str>,
}

pub(crate) struct Engine {
    nodes: Vec<Arc<Node>>,
    settings: Settings,
    /// Release notifications, started by the first waiter.
    notifier: OnceLock<Arc<Notifier>>,
    /// Automatic renewal, started by the first kept-alive lease.
    renewer: OnceLock<Renewer>,
    /// Requests finishing in the background.
    background: Arc<Background>,
    /// The leases held, for [`close`](Self::close) to give back.
    held: Mutex<HeldLeases>,
    /// Set by `close`, under `held`'s lock (so `register` sees it there);
    /// read without the lock by the checks on every acquire.
    closed: AtomicBool,
}

/// The leases held, by id.
type HeldLeases = Slab<Registered>;

/// What `close` needs of a lease: how to release it and how to tell its
/// holder (its state is in its record).
type Registered = Arc<Ownership>;

impl Engine {
    pub(crate) fn new(nodes: Vec<Arc<Node>>, settings: Settings) -> Engine {
        Engine {
            nodes,
            settings,
            notifier: OnceLock::new(),
            renewer: OnceLock::new(),
            background: Arc::default(),
            held: Mutex::default(),
            closed: AtomicBool::new(false),
        }
    }

    pub(crate) fn nodes(&self) -> &[Arc<Node>] {
        &self.nodes
    }

    pub(crate) fn settings(&self) -> &Settings {
        &self.settings
    }

    pub(crate) fn background(&self) -> &Arc<Background> {
        &self.background
    }

    /// The renewal task, if any lease was ever kept alive.
    pub(crate) fn started_renewer(&self) -> Option<&Renewer> {
        self.renewer.get()
    }

    /// The renewer, set up on first use.
    pub(crate) fn renewer(&self) -> &Renewer {
        self.renewer
            .get_or_init(|| Renewer::new(self.nodes.clone(), self.settings.renew_fraction))
    }

    /// The release notifications, set up on first use.
    pub(crate) fn notifier(&self) -> &Arc<Notifier> {
        self.notifier
            .get_or_init(|| Notifier::new(&self.nodes, self.settings.connect_timeout))
    }

    /// The release notifications, if any task ever waited.
    pub(crate) fn started_notifier(&self) -> Option<&Arc<Notifier>> {
        self.notifier.get()
    }

    /// Tells this process's waiters that our release of `key` went through,
    /// without waiting for Redis to echo the PUBLISH.
    /// `release_id` is asked for only if a task of this Locker waits.
    pub(crate) fn announce_release(&self, key: &str, release_id: impl FnOnce() -> ReleaseId) {
        if let Some(notifier) = self.notifier.get() {
            notifier.released(&release_channel(key), release_id);
        }
    }

    /// Releases a lock that was held on every node that may hold it, and
    /// tells the waiters (see [`release_on`]).
    pub(crate) async fn release(&self, ownership: &Ownership, timeout: Duration) {
        let announce = Announce::Waiters;
        if release_on(&self.nodes, ownership, timeout, announce).await {
            for key in ownership.each_key() {
                self.announce_release(key, || ReleaseId::of(&ownership.token));
            }
        }
    }

    /// [`Error::SameServer`] if two nodes are known to be one server (their
    /// main connections reached the same `run_id`); no I/O.
    pub(crate) fn same_server(&self) -> Option<Error> {
        let (node, same_as) = self.nodes.first()?.known_pair()?;
        Some(Error::SameServer {
            node: self.nodes[node].id().clone(),
            same_as: self.nodes[same_as].id().clone(),
        })
    }

    /// Checks a TTL against this Locker's drift and timeout settings.
    pub(crate) fn timing(&self, field: &'static str, ttl: Duration) -> Result<Timing, Error> {
        let mut timing = Timing::new(field, ttl, self.settings.drift, self.settings.node_timeout)?;
        timing.lock_delay = self.settings.lock_delay;
        // The node timeout depends on the TTL when not set: a shorter TTL
        // may leave no room for the durability WAIT.
        self.settings
            .durability
            .check(timing.node_timeout)
            .map_err(|why| Error::invalid(field, why))?;
        let quarantine = self.settings.quarantine;
        let delay = timing.lock_delay;
        if timing.ttl + delay > MAX_TTL {
            return Err(Error::invalid(
                field,
                format!(
                    "{:?} with the {delay:?} lock-delay is above the largest supported hold, \
                     {MAX_TTL:?}",
                    timing.ttl
                ),
            ));
        }
        if !quarantine.is_zero() && timing.ttl + timing.drift + delay > quarantine {
            let with_delay = match delay.is_zero() {
                true => String::new(),
                false => format!(" and the {delay:?} lock-delay"),
            };
            return Err(Error::invalid(
                field,
                format!(
                    "{:?} plus its drift allowance{with_delay} outlasts the restart quarantine \
                     ({quarantine:?}): a server that restarted empty could grant the lock \
                     again while it is held; raise advanced.restart_quarantine",
                    timing.ttl
                ),
            ));
        }
        Ok(timing)
    }

    pub(crate) fn key(&self, resource: &str) -> String {
        lock_key(&self.settings.prefix, resource)
    }

    /// The keys of `resource`; a claim on them draws a fencing token when
    /// the Locker's settings say so.
    pub(crate) fn keys(&self, resource: &str) -> LockKeys {
        match self.settings.fencing {
            true => self.fenced_keys(resource),
            false => LockKeys::new(&self.settings.prefix, resource, 0),
        }
    }

    /// The keys of `resource`, drawing a fencing token whatever the
    /// settings say (an election's term).
    pub(crate) fn fenced_keys(&self, resource: &str) -> LockKeys {
        LockKeys::new(
            &self.settings.prefix,
            resource,
            self.settings.fence_expiry.as_millis() as u64,
        )
    }

    fn held(&self) -> MutexGuard<'_, HeldLeases> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Records a lease as held, so that `close` gives it back; its id, or
    /// [`Error::Closed`] once the Locker is closed.
    pub(crate) fn register(&self, ownership: Arc<Ownership>) -> Result<NonZeroU64, Error> {
        let mut held = self.held();
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        telemetry::leases_held(1);
        Ok(held.insert(ownership))
    }

    /// Takes a lease off the record. `false` if `close` took it first: the
    /// lease is released already, and nobody else may release it again.
    pub(crate) fn unregister(&self, id: NonZeroU64) -> bool {
        let removed = self.held().remove(&id.get()).is_some();
        if removed {
            telemetry::leases_held(-1);
        }
        removed
    }

    /// Whether a live lease of this Locker holds the lock of `key` (a
    /// refused acquire's error says so: locks are not reentrant). Walks
    /// every lease held: for an acquire's final error only.
    pub(crate) fn holds(&self, key: &str) -> bool {
        self.holds_as(key, |_| true)
    }

    /// Whether a live lease of this Locker holds the lock of `key` alone
    /// (a waiter of this Locker then waits for it in the process). Walks
    /// every lease held: for a refused waiter's first look only.
    pub(crate) fn holds_alone(&self, key: &str) -> bool {
        self.holds_as(key, |hold| hold == Hold::Exclusive)
    }

    fn holds_as(&self, key: &str, wanted: impl Fn(Hold) -> bool) -> bool {
        let now = std::time::Instant::now();
        self.held().iter().any(|lease| {
            let mut holds = lease.each_key().zip(lease.holds());
            holds.any(|(k, &h)| **k == *key && wanted(h))
                && lease.state.get().lost_at(now).is_none()
        })
    }

    /// Closes the engine: no lease is handed out any more, every lease still
    /// held is reported lost ([`LostReason::Closed`]) and released, and once
    /// the background requests are done the services stop.
    pub(crate) async fn close(&self) {
        let leases: Vec<Registered> = {
            let mut held = self.held();
            self.closed.store(true, Ordering::Release);
            held.drain()
        };
        // Renewal stops first: from here on nothing publishes to a lease's
        // state but us, and no renewal races the releases below.
        if let Some(renewer) = self.renewer.get() {
            renewer.shutdown();
        }
        telemetry::leases_held(-(leases.len() as i64));
        for lease in &leases {
            let newly_lost = lease.state.modify_if(|s| {
                let fresh = s.lost.is_none();
                s.lost.get_or_insert(LostReason::Closed);
                fresh
            });
            if newly_lost {
                telemetry::lease_lost(LostReason::Closed);
            }
        }
        if !leases.is_empty() {
            tracing::info!(leases = leases.len(), "closing: releasing the leases held");
        }
        // Acquire requests still on their way to slow nodes go first, so a
        // release cannot overtake them.
        self.background.idle().await;
        let releases = leases
            .iter()
            .map(|lease| self.release(lease, lease.release_timeout()));
        futures_util::future::join_all(releases).await;
        self.background.idle().await;
        if let Some(notifier) = self.notifier.get() {
            notifier.shutdown();
        }
    }
}
