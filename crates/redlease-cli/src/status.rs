//! `redlease status`: per node, whether a lock is held and for how long,
//! and the lock's fencing counter. Reads only the key's TTL and the
//! counter, never the key's value: that is the holder's secret token.

use std::collections::HashMap;
use std::time::Duration;

use clap::Args;
use redlease::Locker;

use crate::duration;
use crate::errors::chain;
use crate::exit::{self, Exit};
use crate::nodes::{self, NodesArg};
use crate::probe::Probe;
use crate::table::Table;

#[derive(Args, Debug)]
#[command(after_help = "\
A lock is held when a quorum of nodes has its key. A key on fewer nodes is \
the trace of an attempt that failed, or of a lease ending; it expires by \
its TTL.

Example:
  redlease status --nodes redis://a:6379,redis://b:6379,redis://c:6379 --key nightly-report

Exit codes: 0 the state is known (held or free); 2 usage; 69 too few nodes \
answered to tell.")]
pub struct StatusArgs {
    #[command(flatten)]
    nodes: NodesArg,

    /// The lock's name.
    #[arg(long, value_name = "NAME")]
    key: String,

    /// Prefix of the lock's Redis key (the key is PREFIX{NAME}).
    #[arg(long, value_name = "PREFIX", default_value = "redlease:")]
    key_prefix: String,

    /// How long each node may take to connect and answer.
    #[arg(long, value_name = "D", default_value = "2s", value_parser = duration::parse)]
    timeout: Duration,
}

/// What one node says about the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hold {
    Free,
    /// Held, with this much left on the key.
    Held(Duration),
    /// Held by a key without expiry: not written by redlease.
    Forever,
}

struct NodeState {
    hold: Hold,
    fence: Option<u64>,
    /// Clients subscribed to the lock's release channel: one per process
    /// (Locker) waiting for it.
    waiting: u64,
}

pub async fn status(args: StatusArgs) -> Exit {
    let urls = match args.nodes.urls() {
        Ok(urls) => urls,
        Err(exit) => return exit,
    };
    // The Locker names the keys exactly as `run` and the library do, and
    // checks the node list; it does no I/O.
    let locker = match Locker::builder(&urls)
        .key_prefix(args.key_prefix.as_str())
        .build()
    {
        Ok(locker) => locker,
        Err(e) => return Exit::with(exit::USAGE, chain(&e)),
    };
    if args.key.is_empty() {
        return Exit::with(exit::USAGE, "the lock name (--key) is empty");
    }
    let keys = Keys {
        lock: locker.key(&args.key),
        fence: locker.fence_key(&args.key),
        released: locker.release_channel(&args.key),
    };
    let key = keys.lock.clone();

    let reads: Vec<_> = urls
        .iter()
        .map(|url| {
            let (url, keys) = (url.clone(), keys.clone());
            tokio::spawn(async move { read(&url, &keys, args.timeout).await })
        })
        .collect();
    let mut states = Vec::new();
    for read in reads {
        states.push(
            read.await
                .unwrap_or_else(|e| Err(format!("internal error: {}", chain(&e)))),
        );
    }

    let quorum = locker.quorum();
    println!(
        "lock {:?} (key {key}) on {} node{}, quorum {quorum}",
        args.key,
        urls.len(),
        if urls.len() == 1 { "" } else { "s" }
    );
    let mut table = Table::new(&["NODE", "LOCK", "FENCING COUNTER", "WAITING"]);
    for (i, (url, state)) in urls.iter().zip(&states).enumerate() {
        let node = format!("{i} {}", nodes::describe(url));
        let row = match state {
            Ok(s) => vec![
                node,
                show_hold(s.hold),
                show_fence(s.fence),
                s.waiting.to_string(),
            ],
            Err(e) => vec![
                node,
                format!("unreachable: {e}"),
                String::new(),
                String::new(),
            ],
        };
        table.row(row, None);
    }
    print!("{}", table.render());

    let answered: Vec<&NodeState> = states.iter().filter_map(|s| s.as_ref().ok()).collect();
    let counter = answered.iter().filter_map(|s| s.fence).max();
    let counter = match counter {
        Some(n) => format!("fencing counter {n} (the next holder's token will be higher)"),
        None => "no fencing counter (no acquisition lately)".to_string(),
    };
    let verdict = verdict(&answered, urls.len(), quorum);
    // Each waiting process subscribes on every node it reaches.
    let waiting = answered.iter().map(|s| s.waiting).max().unwrap_or(0);
    println!(
        "{}; {waiting} process{} waiting; {counter}",
        verdict.text,
        if waiting == 1 { "" } else { "es" }
    );
    match verdict.known {
        true => Exit::code(exit::OK),
        false => Exit::with(
            exit::UNAVAILABLE,
            format!(
                "only {} of {} nodes answered; a quorum is {quorum}",
                answered.len(),
                urls.len()
            ),
        ),
    }
}

/// The Redis names of one lock.
#[derive(Clone)]
struct Keys {
    lock: String,
    fence: String,
    released: String,
}

async fn read(url: &str, keys: &Keys, timeout: Duration) -> Result<NodeState, String> {
    let mut probe = Probe::connect(url, timeout).await?;
    // PTTL, not GET: the key's value is the holder's token.
    let (pttl, fence, subscribers): (i64, Option<String>, HashMap<String, u64>) = probe
        .pipe(
            redis::pipe()
                .cmd("PTTL")
                .arg(&keys.lock)
                .cmd("GET")
                .arg(&keys.fence)
                .cmd("PUBSUB")
                .arg("NUMSUB")
                .arg(&keys.released),
        )
        .await?;
    let hold = match pttl {
        -2 => Hold::Free,
        -1 => Hold::Forever,
        ms => Hold::Held(Duration::from_millis(ms.max(0) as u64)),
    };
    Ok(NodeState {
        hold,
        fence: fence.and_then(|f| f.parse().ok()),
        waiting: subscribers.values().sum(),
    })
}

fn show_hold(hold: Hold) -> String {
    match hold {
        Hold::Free => "free".to_string(),
        Hold::Held(left) => format!("held, {} left", duration::show(left)),
        Hold::Forever => "held, no expiry (not set by redlease?)".to_string(),
    }
}

fn show_fence(fence: Option<u64>) -> String {
    fence.map_or_else(|| "-".to_string(), |n| n.to_string())
}

struct Verdict {
    text: String,
    /// Enough nodes answered to say held or free.
    known: bool,
}

/// Held when a quorum has the key, free when a quorum has not: exactly the
/// test an acquire would meet.
fn verdict(answered: &[&NodeState], nodes: usize, quorum: usize) -> Verdict {
    let mut left: Vec<Option<Duration>> = answered
        .iter()
        .filter_map(|s| match s.hold {
            Hold::Free => None,
            Hold::Held(d) => Some(Some(d)),
            Hold::Forever => Some(None),
        })
        .collect();
    let held = left.len();
    let free = answered.len() - held;
    if held >= quorum {
        // The lock stays held while a quorum keeps the key: until the
        // quorum-th longest TTL runs out, unless renewed.
        left.sort_by(|a, b| b.unwrap_or(Duration::MAX).cmp(&a.unwrap_or(Duration::MAX)));
        let until = match left[quorum - 1] {
            Some(d) => format!("for {} more unless renewed or released", duration::show(d)),
            None => "with no expiry".to_string(),
        };
        Verdict {
            text: format!("HELD on {held} of {nodes} nodes, {until}"),
            known: true,
        }
    } else if free >= quorum {
        let stale = match held {
            0 => String::new(),
            n => format!(
                " (a leftover key on {n} node{} expires by itself)",
                if n == 1 { "" } else { "s" }
            ),
        };
        Verdict {
            text: format!("FREE{stale}"),
            known: true,
        }
    } else {
        Verdict {
            text: format!(
                "UNKNOWN: {} of {nodes} nodes answered (held on {held}, free on {free})",
                answered.len()
            ),
            known: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(hold: Hold) -> NodeState {
        NodeState {
            hold,
            fence: None,
            waiting: 0,
        }
    }

    fn judge(holds: &[Hold], nodes: usize, quorum: usize) -> Verdict {
        let states: Vec<NodeState> = holds.iter().copied().map(node).collect();
        verdict(&states.iter().collect::<Vec<_>>(), nodes, quorum)
    }

    #[test]
    fn held_only_on_a_quorum_and_until_the_quorum_th_longest_ttl() {
        let s = |n| Hold::Held(Duration::from_secs(n));
        let v = judge(&[s(9), s(3), s(7)], 3, 2);
        assert!(v.known);
        assert!(v.text.starts_with("HELD on 3 of 3"), "{}", v.text);
        assert!(v.text.contains("7.0s"), "{}", v.text);

        let v = judge(&[s(9), Hold::Free, Hold::Free], 3, 2);
        assert!(
            v.text.starts_with("FREE (a leftover key on 1 node"),
            "{}",
            v.text
        );

        let v = judge(&[s(9)], 3, 2);
        assert!(!v.known);
        assert!(v.text.starts_with("UNKNOWN: 1 of 3"), "{}", v.text);

        let v = judge(&[Hold::Forever], 1, 1);
        assert!(v.text.contains("no expiry"), "{}", v.text);
    }
}
