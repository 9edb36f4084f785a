//! Leases handed between processes: a Locker adopts an exported lease's
//! handle (see [`Lease::export`]), or gives it back without adopting it.

use std::sync::Arc;
use std::time::Duration;

use crate::api::lease::Lease;
use crate::api::locker::Locker;
use crate::coord::acquire::adopt::adopt;
use crate::coord::acquire::attempt::Grant;
use crate::coord::engine::Engine;
use crate::coord::ownership::Ownership;
use crate::coord::release::release_adopted;
use crate::core::claim::Claim;
use crate::core::error::Error;
use crate::core::handle::Exported;
use crate::core::mode::{Hold, LockMode};

/// What a lease handle ([`Lease::export`]) says, read without the token
/// it carries: for a program that must build a Locker able to adopt it
/// (the same key prefix, a TTL the restart quarantine covers) or name its
/// locks in messages. No I/O.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), redlease::Error> {
/// # let nodes = redlease_testkit::RedisNodes::start(1);
/// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
/// let handle = locker.lock_all(["b", "a"]).await?.export();
/// let info = redlease::HandleInfo::parse(&handle)?;
/// assert_eq!(info.names, ["a", "b"]);
/// assert_eq!(info.key_prefix, "redlease:");
/// # locker.release_handle(&handle).await }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HandleInfo {
    /// The names the lease holds, in their canonical order.
    pub names: Vec<String>,
    /// How it holds them (the first name, for several names held in
    /// different modes: see `modes`).
    pub mode: LockMode,
    /// How it holds each name, in the order of `names`.
    pub modes: Vec<LockMode>,
    /// A semaphore's number of permits, for [`LockMode::Permit`].
    pub permits: Option<u32>,
    /// The TTL it was taken with, which `adopt` extends it by.
    pub ttl: Duration,
    /// The key prefix of the Locker that took it: an adopting Locker
    /// needs the same.
    pub key_prefix: String,
    /// Each name's fencing token, when drawn.
    pub fencing_tokens: Option<Vec<u64>>,
}

impl HandleInfo {
    /// Reads `handle`; [`Error::InvalidInput`](crate::Error::InvalidInput)
    /// for a string that is not a handle, or one that was cut short or
    /// altered (a handle carries a check of all its fields).
    pub fn parse(handle: &str) -> Result<HandleInfo, Error> {
        let exported = Exported::decode(handle).map_err(|why| Error::invalid("handle", why))?;
        let hold = exported.hold();
        Ok(HandleInfo {
            names: exported.names,
            mode: hold.mode(),
            modes: exported.holds.iter().map(|h| h.mode()).collect(),
            permits: match hold {
                Hold::Permit { permits, .. } => Some(permits.get()),
                _ => None,
            },
            ttl: exported.ttl,
            key_prefix: exported.prefix,
            fencing_tokens: exported.fences,
        })
    }
}

/// A handle read and checked against `engine`'s settings, before any I/O.
fn read(engine: &Engine, handle: &str) -> Result<(Exported, Ownership), Error> {
    let exported = Exported::decode(handle).map_err(|why| Error::invalid("handle", why))?;
    let prefix = &engine.settings().prefix;
    if &exported.prefix != prefix {
        return Err(Error::invalid(
            "handle",
            format!(
                "the handle's lease was taken with the key prefix {:?}, this Locker's is \
                 {prefix:?}: adopt it with a Locker of the same prefix and nodes",
                exported.prefix
            ),
        ));
    }
    for name in &exported.names {
        crate::core::keys::check_resource(prefix, name)?;
    }
    // In the canonical order, one hold each: `decode` checked.
    let keys = exported
        .names
        .iter()
        .map(|name| engine.keys(name))
        .collect();
    let claim = Claim::of(keys, exported.holds.clone());
    let node_timeout = engine.timing("ttl", exported.ttl)?.node_timeout;
    let ownership = Ownership::adopted(
        claim,
        engine.nodes().len(),
        exported.token.clone(),
        node_timeout,
    );
    Ok((exported, ownership))
}

impl Locker {
    /// Takes over an exported lease (see [`Lease::export`]): checks that a
    /// quorum still holds it, by extending it by the TTL it was taken
    /// with, and returns it as a lease of this Locker, which can extend,
    /// keep alive and release it. Its fencing tokens are the ones it was
    /// taken with: a handle carries a check of all its fields (the token
    /// among them), so a handle cut short or edited, which would read as
    /// another fencing token or another name, is refused. A handle whose
    /// lease is gone (expired, released, taken over) is
    /// [`Error::NotHeld`]; a string that is not a handle, one cut short
    /// or altered, or one made with another key prefix, is
    /// [`Error::InvalidInput`](crate::Error::InvalidInput) (field
    /// `"handle"`) before any I/O.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// let handle = locker.lock("deploy").await?.export();
    /// let lease = locker.adopt(&handle).await?.keep_alive()?;
    /// # lease.release().await }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes leaves the lease as it was
    /// (held until its TTL, or the extend's if that reached a node).
    pub async fn adopt(&self, handle: &str) -> Result<Lease, Error> {
        let engine = &self.engine;
        let (exported, ownership) = read(engine, handle)?;
        if engine.is_closed() {
            return Err(Error::Closed);
        }
        let timing = engine.timing("ttl", exported.ttl)?;
        let label = exported.names.join(", ");
        let many = exported.names.len() > 1;
        let fences = exported.fences;
        let grant = adopt(engine, Arc::new(ownership), timing, &label).await?;
        let grant = Grant {
            fence: fences.as_ref().and_then(|f| f.first().copied()),
            fences: fences.filter(|_| many),
            ..grant
        };
        let lease = match many {
            true => Lease::new_all(grant, exported.names),
            false => Lease::new(grant, exported.names.into_iter().next().unwrap_or_default()),
        };
        match lease {
            Ok(lease) => Ok(lease),
            Err(unregistered) => Err(Box::pin(unregistered.give_back()).await),
        }
    }

    /// Gives back an exported lease (see [`Lease::export`]) without
    /// adopting it: released on every node that holds it, and its waiters
    /// told. A handle whose lease is gone is [`Error::NotHeld`], never a
    /// silent success; a string that is not a handle, or one cut short or
    /// altered, is [`Error::InvalidInput`](crate::Error::InvalidInput)
    /// before any I/O.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), redlease::Error> {
    /// # let nodes = redlease_testkit::RedisNodes::start(1);
    /// # let locker = redlease::Locker::builder(nodes.urls()).advanced(|a| a.restart_quarantine(std::time::Duration::ZERO)).build()?; // brand-new test servers
    /// let handle = locker.lock("deploy").await?.export();
    /// locker.release_handle(&handle).await?;
    /// assert!(locker.release_handle(&handle).await.is_err()); // not twice
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the lease held on some nodes until
    /// its TTL runs out.
    pub async fn release_handle(&self, handle: &str) -> Result<(), Error> {
        let engine = &self.engine;
        let (exported, ownership) = read(engine, handle)?;
        let label = exported.names.join(", ");
        let timeout = engine.timing("ttl", exported.ttl)?.node_timeout;
        release_adopted(engine, Arc::new(ownership), timeout, &label).await
    }
}
