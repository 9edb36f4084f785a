//! A counterexample as a person reads it: one line per step, what
//! happened and what the servers and clients hold after it.

use std::fmt::Write;

use stateright::Path;

use crate::client::{Client, Phase};
use crate::model::{Action, State};
use crate::server::{Kind, Request, Server};
use crate::world::{at, World};

/// The trace of `path`, one line per step.
pub fn render(world: &World, path: &Path<State, Action>) -> String {
    let steps = path.clone().into_vec();
    let mut out = String::new();
    if let Some((first, _)) = steps.first() {
        let fast: Vec<String> = first.servers.iter().map(|s| s.fast.to_string()).collect();
        let _ = writeln!(
            out,
            "world {}: {} servers (clocks fast by [{}] ms), TTL {:?}, drift allowance {:?}, \
             quarantine {:?}",
            world.name,
            world.nodes,
            fast.join(", "),
            world.timing.ttl(),
            world.timing.drift(),
            world.quarantine,
        );
    }
    for pair in steps.windows(2) {
        let (before, action) = (&pair[0].0, pair[0].1);
        let after = &pair[1].0;
        let Some(action) = action else { continue };
        let _ = writeln!(
            out,
            "t={:<3} {:<44} | {}",
            before.now,
            step(before, action),
            summary(after)
        );
    }
    out
}

fn name(c: u8) -> char {
    (b'A' + c) as char
}

fn request(r: &Request) -> String {
    match r {
        Request::Acquire { token, ticket, .. } => match ticket {
            Some(_) => format!("acquire #{} in line", token.attempt),
            None => format!("acquire #{}", token.attempt),
        },
        Request::Extend { token } => format!("extend #{}", token.attempt),
        Request::Release { token, .. } => format!("release #{}", token.attempt),
        Request::RaiseFence { value } => format!("raise fence to f{}", value % 100_000),
    }
}

/// What `action` did, from the state before it.
fn step(before: &State, action: Action) -> String {
    match action {
        Action::Tick => "time moves on 1 ms".into(),
        Action::Begin(c) => match before.clients[usize::from(c)].phase {
            Phase::Waiting { .. } => format!("{} tries again in line", name(c)),
            _ => format!("{} begins an acquisition", name(c)),
        },
        Action::Deliver { client, node, msg } => {
            let m = &before.clients[usize::from(client)].links[usize::from(node)][usize::from(msg)];
            let late = if m.stray { " (abandoned, late)" } else { "" };
            format!(
                "s{node} applies {}'s {}{late}",
                name(client),
                request(&m.request)
            )
        }
        Action::Drop { client, node, msg } => {
            let m = &before.clients[usize::from(client)].links[usize::from(node)][usize::from(msg)];
            format!(
                "{}'s abandoned {} to s{node} is lost",
                name(client),
                request(&m.request)
            )
        }
        Action::TimeOut { client, node } => format!("{} gives up on s{node}", name(client)),
        Action::Renew(c) => format!("{} renews", name(c)),
        Action::Release(c) => format!("{} releases", name(c)),
        Action::Restart(i) => format!("s{i} restarts empty"),
    }
}

fn server(i: usize, s: &Server) -> String {
    let holds: Vec<String> = s
        .members
        .iter()
        .map(|m| {
            let who = name(m.token.client);
            match m.reserved {
                true => format!("{who}~<{}", m.expiry),
                false => format!("{who}#{}<{}", m.token.attempt, m.expiry),
            }
        })
        .collect();
    let kind = match s.kind {
        Kind::Free => "",
        Kind::Alone => "",
        Kind::Readers => "r:",
        Kind::Permits(_) => "p:",
    };
    let mut shown = vec![holds.join(",")];
    shown.extend(s.fence.map(|f| format!("f{}", f % 100_000)));
    shown.retain(|part| !part.is_empty());
    format!("s{i}[{kind}{}]", shown.join(" "))
}

fn client(c: usize, cl: &Client) -> Option<String> {
    let who = name(c as u8);
    let ms = |i: std::time::Instant| {
        let d = i.saturating_duration_since(at(0));
        format!("{:.1}", d.as_secs_f64() * 1000.0)
    };
    Some(match &cl.phase {
        Phase::Holding(lease) => {
            let lost = match lease.lost {
                Some(why) => format!(" lost:{why:?}"),
                None => String::new(),
            };
            format!(
                "{who} holds #{} until {} fence {}{lost}",
                lease.token.attempt,
                ms(lease.valid_until),
                lease.fence % 100_000
            )
        }
        Phase::Waiting { .. } => format!("{who} waits"),
        Phase::Acquiring { .. } | Phase::Fencing { .. } => format!("{who} acquiring"),
        Phase::Releasing { .. } => format!("{who} releasing"),
        Phase::Idle | Phase::Done => return None,
    })
}

/// The servers' holds (`A#1<5`: A's token #1 until tick 5; `A~`: reserved
/// for A; `f`: the fencing counter's last five digits) and the clients'
/// leases.
fn summary(s: &State) -> String {
    let servers: Vec<String> = s
        .servers
        .iter()
        .enumerate()
        .map(|(i, s)| server(i, s))
        .collect();
    let clients: Vec<String> = s
        .clients
        .iter()
        .enumerate()
        .filter_map(|(c, cl)| client(c, cl))
        .collect();
    format!("{} | {}", servers.join(" "), clients.join("; "))
}
