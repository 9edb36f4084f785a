//! A node's subscription task: one connection per node for every channel
//! a Locker's waiters listen on, turning published messages into
//! wake-ups (see the parent module).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use redis::{PushInfo, PushKind, Value};
use tokio::sync::mpsc;

use super::{Command, Notifier, RESUBSCRIBE_EVERY};
use crate::transport::deployment::{Deployment, Subscriber};
use crate::transport::node::Node;

/// One node's subscription connection: runs SUBSCRIBE / UNSUBSCRIBE (or
/// their sharded forms on a cluster) in the order asked, turns published
/// messages into wake-ups, and tells the notifier when the node confirmed a
/// subscription and when the connection broke. Ends when the Locker is gone.
pub(super) async fn node_task(
    node: Arc<Node>,
    index: usize,
    notifier: std::sync::Weak<Notifier>,
    mut commands: mpsc::UnboundedReceiver<Command>,
    timeout: Duration,
) {
    let deployment = node.deployment();
    let (push_tx, mut pushes) = mpsc::unbounded_channel::<PushInfo>();
    // RESP3 lets the connection reconnect and resubscribe on its own after
    // it breaks; until the node confirms again, waiters poll its lock.
    let mut conn: Option<Subscriber> = None;
    // Channels subscribed to, with the generation each confirms: for a
    // Sentinel's new primary after a failover, and for subscribing again.
    let mut channels: HashMap<String, u64> = HashMap::new();
    // Channels this node has not confirmed since they were asked for or
    // since the connection broke.
    let mut unconfirmed: HashSet<String> = HashSet::new();
    let mut switches = deployment.switches();
    let mut resubscribe = tokio::time::interval(RESUBSCRIBE_EVERY);
    resubscribe.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let confirm = |channel: &str, generation: u64| {
        if let Some(n) = notifier.upgrade() {
            n.confirmed(channel, generation, index);
        }
    };
    // The connection broke (or the primary moved): nothing it confirmed
    // counts until it is confirmed again.
    let broke = |unconfirmed: &mut HashSet<String>, channels: &HashMap<String, u64>| {
        if let Some(n) = notifier.upgrade() {
            n.disconnected(index);
        }
        unconfirmed.extend(channels.keys().cloned());
    };
    loop {
        tokio::select! {
            // The sentinels named another primary: subscribe there. The
            // old one still answers (and, once it follows the new one,
            // even relays its messages), but until then it hears nothing.
            Some(()) = async {
                match &mut switches {
                    Some(switched) => switched.changed().await.ok(),
                    None => std::future::pending().await,
                }
            } => {
                broke(&mut unconfirmed, &channels);
                conn = open_subscriber(deployment, timeout, &push_tx).await;
                resubscribe_all(&mut conn, &mut unconfirmed, &channels, timeout, &confirm).await;
            }
            command = commands.recv() => {
                let Some(command) = command else { return };
                if conn.is_none() {
                    conn = open_subscriber(deployment, timeout, &push_tx).await;
                }
                match command {
                    Command::Subscribe { channel, generation } => {
                        channels.insert(channel.clone(), generation);
                        unconfirmed.insert(channel.clone());
                        let Some(conn) = &mut conn else { continue };
                        if subscribe(conn, &channel, timeout).await {
                            unconfirmed.remove(&channel);
                            confirm(&channel, generation);
                        }
                    }
                    Command::Unsubscribe { channel } => {
                        channels.remove(&channel);
                        unconfirmed.remove(&channel);
                        let Some(conn) = &mut conn else { continue };
                        if let Ok(Err(e)) = tokio::time::timeout(timeout, conn.unsubscribe(&channel)).await {
                            tracing::debug!(error = %e, "UNSUBSCRIBE failed");
                        }
                    }
                }
            }
            // Subscribe again where the node has not confirmed: after a
            // failed SUBSCRIBE, or a broken connection that did not come
            // back with its subscriptions (a second SUBSCRIBE is harmless).
            _ = resubscribe.tick(), if !unconfirmed.is_empty() => {
                if conn.is_none() {
                    conn = open_subscriber(deployment, timeout, &push_tx).await;
                }
                resubscribe_all(&mut conn, &mut unconfirmed, &channels, timeout, &confirm).await;
            }
            Some(push) = pushes.recv() => {
                match push.kind {
                    PushKind::Message | PushKind::SMessage => {
                        if let [channel, payload] = push.data.as_slice()
                            && let (Some(channel), Some(payload), Some(n)) =
                                (text(channel), text(payload), notifier.upgrade())
                            && let Some((claim, place)) = n.published(&channel, &payload)
                        {
                            // Handed to a waiter no longer here: pass it
                            // on, in the background.
                            let node = node.clone();
                            tokio::spawn(async move {
                                if let Err(e) = node.leave(&claim, &place, timeout).await {
                                    tracing::debug!(error = %e, "passing a handoff on failed; its window runs out");
                                }
                            });
                        }
                    }
                    PushKind::Disconnection => {
                        broke(&mut unconfirmed, &channels);
                        // After a failover the sentinels name another
                        // primary: subscribe there, not to the old address.
                        if matches!(deployment, Deployment::Sentinel(_)) {
                            conn = open_subscriber(deployment, timeout, &push_tx).await;
                            resubscribe_all(&mut conn, &mut unconfirmed, &channels, timeout, &confirm).await;
                        }
                    }
                    // The connection came back and subscribed again on its
                    // own (RESP3 resubscription).
                    PushKind::Subscribe | PushKind::SSubscribe => {
                        if let Some(channel) = push.data.first().and_then(text)
                            && let Some(&generation) = channels.get(&channel)
                            && unconfirmed.remove(&channel)
                        {
                            confirm(&channel, generation);
                        }
                    }
                    _ => {}
                }
            }
        }
    }
}

/// A new subscription connection; the node task subscribes it to the
/// channels that have waiters.
async fn open_subscriber(
    deployment: &Deployment,
    timeout: Duration,
    pushes: &mpsc::UnboundedSender<PushInfo>,
) -> Option<Subscriber> {
    match deployment.subscriber(timeout, pushes.clone()).await {
        Ok(conn) => Some(conn),
        Err(e) => {
            tracing::warn!(error = %e, "no release notifications from a node; its waiters poll it");
            None
        }
    }
}

/// Subscribes to every channel in `unconfirmed`, and confirms those the
/// node confirmed. Stops at the first failure: the node is down or slow,
/// and a thousand channels must not cost a thousand timeouts in a row.
async fn resubscribe_all(
    conn: &mut Option<Subscriber>,
    unconfirmed: &mut HashSet<String>,
    channels: &HashMap<String, u64>,
    timeout: Duration,
    confirm: &impl Fn(&str, u64),
) {
    let Some(conn) = conn else { return };
    for channel in unconfirmed.clone() {
        if !subscribe(conn, &channel, timeout).await {
            return;
        }
        unconfirmed.remove(&channel);
        if let Some(&generation) = channels.get(&channel) {
            confirm(&channel, generation);
        }
    }
}

/// Subscribes to `channel`; whether it was confirmed in time.
async fn subscribe(conn: &mut Subscriber, channel: &str, timeout: Duration) -> bool {
    match tokio::time::timeout(timeout, conn.subscribe(channel)).await {
        Ok(Ok(())) => true,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "SUBSCRIBE failed; waiters fall back to timers");
            false
        }
        Err(_) => {
            tracing::debug!("SUBSCRIBE timed out; waiters fall back to timers");
            false
        }
    }
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}
