//! An election's leader record: written by the leader at quorum
//! (proclaim.lua) when it wins, when it proclaims a new value, and again
//! before the record's expiry while it leads. Who leads is read with an
//! inspection ([`watch`](crate::coord::watch)), which trusts a node's
//! record only while the lease that wrote it holds the name there.

use std::time::Duration;

use futures_util::future::join_all;

use crate::coord::engine::Engine;
use crate::coord::ownership::Ownership;
use crate::core::error::{Error, Op, Shortfall};
use crate::core::keys::leader_key;
use crate::core::refusal::Refusal;
use crate::protocol::election::Proclaim;
use crate::protocol::lua::PubSub;

/// What a leader says: its term, the revision of its value, the value.
#[derive(Clone, Debug)]
pub(crate) struct Record {
    pub(crate) term: u64,
    pub(crate) revision: u64,
    pub(crate) value: String,
}

/// Writes `record` for the lease of `ownership` on every node, decided
/// at quorum: `Ok` once a quorum wrote it; [`Error::NotHeld`] when
/// refusals rule that out (the lease is gone there), else
/// [`Error::NoQuorum`]. The record expires after the Locker's fencing
/// counters' expiry, unless written again.
pub(crate) async fn proclaim(
    engine: &Engine,
    ownership: &Ownership,
    record: &Record,
    resource: &str,
    timeout: Duration,
) -> Result<(), Error> {
    let key: &str = ownership.key();
    let record_key = leader_key(key);
    let request = Proclaim {
        key,
        record_key: &record_key,
        token: ownership.token.as_str(),
        term: record.term,
        revision: record.revision,
        value: &record.value,
        expiry: record_expiry(engine),
        pubsub: PubSub::Classic,
    };
    let answers = join_all(
        engine
            .nodes()
            .iter()
            .map(|node| async move { (node.id().clone(), node.proclaim(request, timeout).await) }),
    )
    .await;
    let nodes = engine.nodes().len();
    let quorum = ownership.claim.quorum(nodes);
    let (mut succeeded, mut refused, mut failed) = (0, Vec::new(), Vec::new());
    for (node, answer) in answers {
        match answer {
            Ok(true) => succeeded += 1,
            Ok(false) => refused.push(Refusal::bare(node)),
            Err(e) => failed.push(e),
        }
    }
    if succeeded >= quorum {
        return Ok(());
    }
    let shortfall = Shortfall {
        op: Op::Proclaim,
        succeeded,
        nodes,
        quorum,
        refused,
        failed,
    };
    Err(shortfall.into_error(resource, false))
}

/// How long a leader record lives unless written again: the fencing
/// counters' expiry (ten minutes by default), the term's own lifetime.
pub(crate) fn record_expiry(engine: &Engine) -> Duration {
    engine.settings().fence_expiry
}
