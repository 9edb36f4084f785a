//! A waiting writer's mark: how a writer that readers keep waiting gets
//! new readers to queue behind it (see `protocol::shared`), and clears the
//! mark when it stops waiting.

use std::sync::Arc;
use std::time::Instant;

use crate::coord::attempt::{still_usable, Grant};
use crate::coord::engine::Engine;
use crate::core::error::Failure;
use crate::core::keys::LockKeys;
use crate::core::token::Token;
use crate::core::validity::Timing;
use crate::transport::node::Node;

/// A waiting writer's mark (see `protocol::shared`): named by a token of
/// its own, drawn once readers refused the writer, so that every later
/// attempt refreshes the same mark and the writer can clear it. Cleared
/// when the writer takes the lock (its release then wakes the readers
/// behind it), and, announced, when it stops waiting (dropped: in the
/// background). Costs nothing until readers refuse the writer.
#[derive(Default)]
pub(crate) struct WriterMark(Option<Marked>);

struct Marked {
    engine: Arc<Engine>,
    key: Arc<str>,
    timeout: std::time::Duration,
    token: Token,
}

impl WriterMark {
    /// The writer's attempt was granted: clears the mark, if there is one
    /// (see [`took_the_lock`](Self::took_the_lock)), and hands the grant
    /// out, unless clearing it took so long that the lease was spent
    /// meanwhile (the process stalled, say): then the grant is dropped,
    /// which gives the lock back, and the wait goes on with that failure.
    pub(crate) async fn hand_out(
        &mut self,
        grant: Grant,
        timing: Timing,
        resource: &str,
    ) -> Result<Grant, Failure> {
        if self.0.is_none() {
            return Ok(grant);
        }
        let holder = &grant.guard.ownership.token;
        let by = grant
            .valid_until
            .checked_sub(2 * timing.drift)
            .unwrap_or(grant.valid_until);
        // Boxed: only a writer that readers kept waiting has a mark to
        // clear.
        let cleared = Box::pin(self.took_the_lock(holder, by)).await;
        match cleared.then(|| still_usable(&grant, timing, resource)) {
            Some(Err(spent)) => Err(Failure::from(spent)),
            None | Some(Ok(())) => Ok(grant),
        }
    }

    /// The mark's token, once there is one.
    pub(crate) fn token(&self) -> Option<&Token> {
        self.0.as_ref().map(|m| &m.token)
    }

    /// Readers refused the writer: mark it from the next attempt on.
    pub(crate) fn wanted(&mut self, engine: &Arc<Engine>, keys: &LockKeys, timing: Timing) {
        if self.0.is_none() {
            self.0 = Some(Marked {
                engine: engine.clone(),
                key: keys.lock.clone(),
                timeout: timing.node_timeout,
                token: Token::generate(&engine.settings().tag),
            });
        }
    }

    /// The writer took the lock with a lease of token `holder`: clear the
    /// mark before the lease is handed out (so that its release cannot
    /// come first), on a quorum of the nodes, and no later than `by` (a
    /// silent node would otherwise spend the lease). The other nodes'
    /// clears go on in the background, where a release that overtakes one
    /// costs the readers behind the mark there only their wake-up (they
    /// wait for their timers, at most the mark's TTL). Whether there was a
    /// mark to clear.
    pub(crate) async fn took_the_lock(&mut self, holder: &Token, by: Instant) -> bool {
        use futures_util::StreamExt;
        let Some(m) = self.0.take() else {
            return false;
        };
        let quorum = crate::core::quorum::quorum(m.engine.nodes().len());
        let background = m.engine.background().clone();
        let mut clears: futures_util::stream::FuturesUnordered<_> = m
            .engine
            .nodes()
            .iter()
            .map(|node| {
                let (node, key, mark) = (node.clone(), m.key.clone(), m.token.clone());
                let (holder, timeout) = (holder.clone(), m.timeout);
                background.spawn(async move {
                    clear_on(&node, &key, &mark, Some(&holder), timeout).await
                })
            })
            .collect();
        let quorum_cleared = async {
            for _ in 0..quorum {
                clears.next().await;
            }
        };
        let _ = tokio::time::timeout_at(by.into(), quorum_cleared).await;
        true
    }
}

impl Drop for WriterMark {
    fn drop(&mut self) {
        let Some(m) = self.0.take() else {
            return;
        };
        if tokio::runtime::Handle::try_current().is_err() {
            return; // The mark expires with the writer's TTL.
        }
        let background = m.engine.background().clone();
        background.spawn(async move {
            let gives_up = m
                .engine
                .nodes()
                .iter()
                .map(|node| clear_on(node, &m.key, &m.token, None, m.timeout));
            futures_util::future::join_all(gives_up).await;
        });
    }
}

/// Clears the mark `token` names on `node`: the writer `took` the lock
/// with that lease token, or (`None`) gave up, which is announced.
/// A failure is only logged: the mark expires with the writer's TTL.
async fn clear_on(
    node: &Node,
    key: &str,
    token: &Token,
    took: Option<&Token>,
    timeout: std::time::Duration,
) {
    if let Err(e) = node.writer_clear(key, token, took, timeout).await {
        tracing::debug!(error = %e, "clearing the writer-waiting mark failed; it expires");
    }
}
