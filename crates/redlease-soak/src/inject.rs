//! Carries out a fault plan against the rig's nodes and proxies, each fault
//! on its own task at its planned time, and counts what was applied and
//! when each fault was in force.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redlease_testkit::proxy::{Mode, Proxy};

use crate::faults::{Action, Fault, Link, LinkMode};
use crate::rig::{with_node, Nodes};

/// What a fault plan did.
#[derive(Debug, Default)]
pub struct Applied {
    /// Applied faults by kind.
    pub counts: BTreeMap<&'static str, u64>,
    /// Each applied fault, and when it was in force.
    pub windows: Vec<Window>,
}

/// When one fault was in force, measured from the run's epoch: from just
/// before it was applied until it was healed (the node restarted or
/// resumed, the links back to pass) plus, for delayed links, the largest
/// delay (bytes in flight keep their delivery time).
#[derive(Clone, Debug)]
pub struct Window {
    pub fault: Fault,
    pub from: Duration,
    pub to: Duration,
}

/// Applies `plan` (times from `epoch`); returns what was applied, or the
/// first harness error (a node that could not be restarted).
pub async fn run(
    plan: Vec<Fault>,
    nodes: Nodes,
    proxies: Arc<BTreeMap<Link, Proxy>>,
    epoch: Instant,
    verbose: bool,
) -> Result<Applied, String> {
    let tasks: Vec<_> = plan
        .into_iter()
        .map(|fault| {
            let (nodes, proxies) = (nodes.clone(), proxies.clone());
            tokio::spawn(async move {
                tokio::time::sleep_until((epoch + fault.at).into()).await;
                if verbose {
                    eprintln!(
                        "[{:>8.3}s] {}",
                        epoch.elapsed().as_secs_f64(),
                        fault.describe()
                    );
                }
                let from = epoch.elapsed();
                apply(&fault, &nodes, &proxies).await?;
                let to = epoch.elapsed() + max_link_delay(std::slice::from_ref(&fault));
                Ok::<_, String>(Window { fault, from, to })
            })
        })
        .collect();
    let mut applied = Applied::default();
    let mut first_error = None;
    for task in tasks {
        match task.await {
            Ok(Ok(window)) => {
                *applied.counts.entry(window.fault.kind.label()).or_insert(0) += 1;
                applied.windows.push(window);
            }
            Ok(Err(e)) => {
                first_error.get_or_insert(e);
            }
            Err(e) => {
                first_error.get_or_insert(format!("fault task failed: {e}"));
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(applied),
    }
}

async fn apply(
    fault: &Fault,
    nodes: &Nodes,
    proxies: &BTreeMap<Link, Proxy>,
) -> Result<(), String> {
    match &fault.action {
        Action::Kill { node, down } => {
            with_node(nodes, *node, |n| n.kill()).await?;
            // Measured from the moment the process is gone, so an empty
            // node really stays away for longer than the TTL.
            tokio::time::sleep(*down).await;
            with_node(nodes, *node, |n| n.restart()).await
        }
        Action::Pause { node } => {
            with_node(nodes, *node, |n| n.pause()).await?;
            tokio::time::sleep(fault.hold).await;
            with_node(nodes, *node, |n| n.resume()).await
        }
        Action::ClockJump { node, by } => {
            let by = *by;
            with_node(nodes, *node, move |n| n.jump_clock(by)).await
        }
        Action::Links(links) => {
            let hold_until = Instant::now() + fault.hold;
            for (link, mode) in links {
                proxies[link].set(match *mode {
                    LinkMode::Delay { fixed, jitter } => Mode::Delay { fixed, jitter },
                    LinkMode::Blackhole => Mode::Blackhole,
                    LinkMode::Reset => Mode::Reset,
                    LinkMode::Hold => Mode::Hold { until: hold_until },
                });
            }
            tokio::time::sleep(fault.hold).await;
            for (link, _) in links {
                proxies[link].set(Mode::Pass);
            }
            Ok(())
        }
    }
}

/// The longest a byte can still be on its way through a proxy after the
/// last fault ended: the largest planned delay (chunks keep their delivery
/// time when the link heals).
pub fn max_link_delay(plan: &[Fault]) -> Duration {
    plan.iter()
        .filter_map(|f| match &f.action {
            Action::Links(links) => links
                .iter()
                .filter_map(|(_, m)| match m {
                    LinkMode::Delay { fixed, jitter } => Some(*fixed + *jitter),
                    _ => None,
                })
                .max(),
            _ => None,
        })
        .max()
        .unwrap_or(Duration::ZERO)
}
