//! [`Admin`]: a Locker's operator tools and naming: what every node says
//! of a lock, force release, the check that no two nodes are one server,
//! renewal statistics, the keys and channel a lock uses, and waiting for
//! the requests still finishing in the background.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use tracing::Instrument;

use crate::coord::engine::Engine;
use crate::coord::renew::RenewalStats;
use crate::core::error::{Error, Op};
use crate::core::keys::release_channel;
use crate::core::lock_status::LockStatus;
use crate::core::node_error::{NodeError, NodeId};
use crate::core::quorum::quorum;
use crate::core::telemetry;
use crate::core::token::ReleaseId;

/// The operator's side of a [`Locker`](crate::Locker), from
/// [`Locker::admin`](crate::Locker::admin): inspection, force release, the
/// servers check, renewal statistics, the Redis names a lock uses, and
/// waiting for background requests. Nothing here is needed to take and
/// give back locks.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redlease::Error> {
/// # let nodes = redlease_testkit::RedisNodes::start(1);
/// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
/// let admin = locker.admin();
/// println!("{} of {} nodes must agree", admin.quorum(), admin.nodes().len());
/// println!("the lock lives at {}", admin.key("nightly-report"));
/// # Ok(()) }
/// ```
#[derive(Clone, Copy)]
pub struct Admin<'a> {
    engine: &'a Arc<Engine>,
}

impl fmt::Debug for Admin<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Admin")
            .field("nodes", &self.nodes().map(NodeId::addr).collect::<Vec<_>>())
            .field("prefix", &self.engine.settings().prefix)
            .finish()
    }
}

impl<'a> Admin<'a> {
    pub(crate) fn new(engine: &'a Arc<Engine>) -> Self {
        Admin { engine }
    }

    /// What every node says about the lock on `resource`: whether its key
    /// exists and for how long, the fencing counter, and how many processes
    /// wait for it. Never the token. Nodes that fail are reported in place;
    /// [`LockStatus::verdict`](crate::LockStatus::verdict) says whether a
    /// quorum holds it. One round trip per node, at once, each bounded by
    /// the node timeout.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// let status = locker.admin().inspect("nightly-report").await?;
    /// println!("{:?}, fencing counter {:?}", status.verdict(), status.fencing_counter());
    /// for (node, answer) in &status.nodes {
    ///     match answer {
    ///         Ok(state) => println!("{node}: {:?}", state.key),
    ///         Err(e) => println!("{node}: {e}"),
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self, resource: &str) -> Result<LockStatus, Error> {
        crate::coord::watch::inspect(self.engine, resource).await
    }

    /// Connects to every node now and checks that no two of them are one
    /// Redis server (by its `run_id`: `localhost:6379` and
    /// `127.0.0.1:6379` look different but are not). Returns the nodes that
    /// could not be reached (and so not checked); they are checked once
    /// their connection reaches a server, and locks fail with the same
    /// error from then on. A cluster node is checked by the servers of the
    /// primaries its client connected to.
    ///
    /// Call it at start-up to fail fast on a configuration that would
    /// count one server's vote twice: a Locker that finds such a pair
    /// takes no lock ([`Error::SameServer`]). Each node is bounded by the
    /// connect timeout plus the node timeout.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let port = nodes.node(0).port();
    /// let one_server_twice = [
    ///     format!("redis://127.0.0.1:{port}"),
    ///     format!("redis://localhost:{port}"),
    /// ];
    /// let locker = redlease::Locker::new(one_server_twice)?;
    /// match locker.admin().check_servers().await {
    ///     Err(redlease::Error::SameServer { node, same_as, .. }) => {
    ///         println!("{node} is {same_as} again")
    ///     }
    ///     other => panic!("{other:?}"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn check_servers(&self) -> Result<Vec<NodeError>, Error> {
        let settings = self.engine.settings();
        let timeout =
            settings.connect_timeout + self.engine.timing("ttl", settings.ttl)?.node_timeout;
        let answers = join_all(self.engine.nodes().iter().map(|node| node.connect(timeout))).await;
        if let Some(pair) = self.engine.same_server() {
            return Err(pair);
        }
        Ok(answers.into_iter().filter_map(Result::err).collect())
    }

    /// Deletes the lock on `resource` on every node, **whoever holds it**,
    /// and wakes its waiters. Returns on how many nodes a key was deleted.
    ///
    /// This breaks the lock's promise: a holder that is still working is
    /// not told (it finds out at its next renewal or extend, up to a third
    /// of its TTL later, and its lease reports [`LostReason::Refused`](crate::LostReason::Refused)),
    /// and another client may take the lock at once, so two may work at
    /// the same time. Use it for a lock whose holder is known dead and
    /// whose TTL is too long to wait out (or was set without one), and let
    /// the fencing token protect the resource: the fencing counter is kept,
    /// so the next holder's token is still higher than the old holder's.
    ///
    /// Every node must answer: if one fails, the error says which
    /// ([`Error::NoQuorum`] with [`Op::ForceRelease`](crate::Op::ForceRelease))
    /// and the keys on the others are deleted all the same.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// let deleted_on = locker.admin().force_release("nightly-report").await?;
    /// eprintln!("force-released: the key was on {deleted_on} nodes");
    /// # Ok(()) }
    /// ```
    pub async fn force_release(&self, resource: &str) -> Result<usize, Error> {
        let span = tracing::info_span!(
            "redlease.force_release",
            resource,
            outcome = tracing::field::Empty,
            elapsed_ms = tracing::field::Empty,
        );
        let timed = telemetry::is_timed(&span);
        async {
            let started = timed.then(Instant::now);
            let result = self.force_release_everywhere(resource).await;
            telemetry::finished(Op::ForceRelease, result.as_ref().map(|_| ()), started);
            result
        }
        .instrument(span)
        .await
    }

    async fn force_release_everywhere(&self, resource: &str) -> Result<usize, Error> {
        let timeout = self.admin_timeout(resource)?;
        let key = self.engine.key(resource);
        let release_id = ReleaseId::new();
        let answers = join_all(
            self.engine
                .nodes()
                .iter()
                .map(|node| node.force_release(&key, release_id.as_str(), timeout)),
        )
        .await;
        let deleted = answers.iter().filter(|a| matches!(a, Ok(true))).count();
        if deleted > 0 {
            // A lock broken by hand: worth a warning wherever logs go.
            tracing::warn!(resource, key, deleted_on = deleted, "lock force-released");
            self.engine.announce_release(&key, || release_id);
        } else {
            tracing::info!(
                resource,
                key,
                "force-release: no node that answered held the lock; nothing was deleted"
            );
        }
        let failed: Vec<_> = answers.into_iter().filter_map(Result::err).collect();
        if failed.is_empty() {
            return Ok(deleted);
        }
        let nodes = self.engine.nodes().len();
        Err(Error::NoQuorum {
            op: Op::ForceRelease,
            resource: resource.to_string(),
            succeeded: nodes - failed.len(),
            quorum: nodes,
            nodes,
            failed,
            refused_by: Vec::new(),
        })
    }

    /// Checks the name an admin call is about, and gives its per-node
    /// timeout: the one a lock with the default TTL gets.
    fn admin_timeout(&self, resource: &str) -> Result<Duration, Error> {
        self.check_name(resource)?;
        let settings = self.engine.settings();
        Ok(self.engine.timing("ttl", settings.ttl)?.node_timeout)
    }

    /// How automatic renewal is doing: leases kept alive and round trips
    /// spent so far.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// assert_eq!(locker.admin().renewal_stats().leases, 0);
    /// # Ok(()) }
    /// ```
    pub fn renewal_stats(&self) -> RenewalStats {
        self.engine
            .started_renewer()
            .map(|r| r.stats())
            .unwrap_or_default()
    }

    /// Waits until every request this Locker finishes in the background is
    /// done: those still on their way to slower nodes after a quorum already
    /// answered (`try_lock`, `lock`, `extend` and `release` return at
    /// quorum), and the releases of dropped leases. Each is bounded by its
    /// node timeout. Unlike [`Locker::close`](crate::Locker::close), it
    /// releases nothing and leaves the Locker open; a process about to exit
    /// calls `close`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// let lease = locker.lock("cron:report").await?;
    /// drop(lease); // released in the background
    /// locker.admin().wait_for_background().await; // the release is done
    /// # Ok(()) }
    /// ```
    pub async fn wait_for_background(&self) {
        self.engine.background().idle().await;
    }

    /// Checks that `resource` can name a lock of this Locker, as every call
    /// that takes a lock name does first: not empty, and its key no longer
    /// than [`MAX_KEY_LEN`](crate::MAX_KEY_LEN). No I/O; use it to refuse a
    /// name from user input early. The error shows the name's length and
    /// its start, never a whole long name.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// let locker = redlease::Locker::new(["redis://127.0.0.1:6379"])?;
    /// let admin = locker.admin();
    /// assert!(admin.check_name("invoice:42").is_ok());
    /// assert!(matches!(
    ///     admin.check_name(""),
    ///     Err(redlease::Error::InvalidInput { field: "resource", .. })
    /// ));
    /// assert!(admin.check_name(&"x".repeat(1 << 20)).is_err());
    /// # Ok(()) }
    /// ```
    pub fn check_name(&self, resource: &str) -> Result<(), Error> {
        crate::core::keys::check_resource(&self.engine.settings().prefix, resource)
    }

    /// The Redis key that holds the lock on `resource`: the key prefix, then
    /// the resource in braces (a Redis Cluster hash tag).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// let locker = redlease::Locker::new(["redis://127.0.0.1:6379"])?;
    /// assert_eq!(locker.admin().key("orders"), "redlease:{orders}");
    /// let longest = "n".repeat(redlease::MAX_KEY_LEN - "redlease:{}".len());
    /// assert_eq!(locker.admin().key(&longest).len(), redlease::MAX_KEY_LEN);
    /// # Ok(()) }
    /// ```
    pub fn key(&self, resource: &str) -> String {
        self.engine.key(resource)
    }

    /// The Redis key of `resource`'s fencing counter: the lock key with
    /// `:fence` appended (same hash slot).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// let locker = redlease::Locker::new(["redis://127.0.0.1:6379"])?;
    /// assert_eq!(locker.admin().fence_key("orders"), "redlease:{orders}:fence");
    /// # Ok(()) }
    /// ```
    pub fn fence_key(&self, resource: &str) -> String {
        self.engine.keys(resource).fence()
    }

    /// The pub/sub channel a release of `resource` is announced on: the
    /// lock key with `:released` appended. Each release publishes a random
    /// id there (never the token).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// let locker = redlease::Locker::new(["redis://127.0.0.1:6379"])?;
    /// assert_eq!(
    ///     locker.admin().release_channel("orders"),
    ///     "redlease:{orders}:released"
    /// );
    /// # Ok(()) }
    /// ```
    pub fn release_channel(&self, resource: &str) -> String {
        release_channel(&self.key(resource))
    }

    /// The nodes, in the order given.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// for node in locker.admin().nodes() {
    ///     println!("{node}");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn nodes(&self) -> impl ExactSizeIterator<Item = &'a NodeId> + 'a + use<'a> {
        self.engine.nodes().iter().map(|n| n.id())
    }

    /// How many nodes must agree: `nodes / 2 + 1`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// let admin = locker.admin();
    /// println!("{} of {} nodes must agree", admin.quorum(), admin.nodes().len());
    /// # Ok(()) }
    /// ```
    pub fn quorum(&self) -> usize {
        quorum(self.engine.nodes().len())
    }
}
