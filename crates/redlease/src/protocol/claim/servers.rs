//! The engine's scripts on a real server: every mode waits in one queue
//! in arrival order, a release wakes exactly the waiters that now fit,
//! a waiter that is gone is passed over, a large permit weight is never
//! overtaken, sets take their names in turn, a downgrade lets the
//! readers in line join, and renewal, leaving and inspection. Every wait
//! is bounded.

use std::time::Duration;

use redis::{Cmd, Connection, FromRedisValue};
use redlease_testkit::RedisNode;

use super::*;
use crate::core::mode::Hold;
use crate::core::refusal::{Owner, READERS_OWNER};

#[cfg(test)]
mod steps;

const TTL: Duration = Duration::from_secs(10);

/// A server with the engine's scripts loaded, and connections that listen
/// as Lockers' waiters do.
struct Fixture {
    node: RedisNode,
    conn: Connection,
    /// Subscribed to Lockers' own channels, by tag.
    listeners: Vec<(String, std::net::TcpStream)>,
}

fn fixture() -> Fixture {
    let node = RedisNode::start();
    let mut conn = node.client().get_connection().unwrap();
    for lua in [
        &*ACQUIRE,
        &*RELEASE,
        &*EXTEND,
        &*DOWNGRADE,
        &*LEAVE,
        &*INSPECT,
    ] {
        let sha: String = command("SCRIPT")
            .arg("LOAD")
            .arg(lua.code())
            .query(&mut conn)
            .unwrap();
        assert_eq!(sha, lua.hash());
    }
    Fixture {
        node,
        conn,
        listeners: Vec::new(),
    }
}

/// A command by name: test code, which the scan of the commands the
/// library sends (commands.rs) leaves out.
fn command(name: &str) -> Cmd {
    let mut cmd = Cmd::new();
    cmd.arg(name);
    cmd
}

/// A Locker's tag: 16 hex digits.
fn tag(n: u8) -> String {
    format!("{n:02x}").repeat(8)
}

/// A token of the Locker tagged `tag(t)`: 48 hex digits.
fn token(t: u8, n: u32) -> String {
    format!("{}{n:032x}", tag(t))
}

/// Waiter `id` of the Locker tagged `tag(t)`, with a handoff window.
fn place(t: u8, id: u32) -> String {
    format!("{}:{id}:500", tag(t))
}

fn permits(n: u32, w: u32) -> Hold {
    Hold::Permit {
        permits: std::num::NonZeroU32::new(n).unwrap(),
        weight: std::num::NonZeroU32::new(w).unwrap(),
        majority: false,
    }
}

const KEY: &str = "t:{x}";

impl Fixture {
    fn acquire_on(
        &mut self,
        keys: &[&str],
        holds: &[Hold],
        token: &str,
        line: Option<(&str, u64)>,
    ) -> ClaimAcquireReply {
        let fence_keys: Vec<String> = keys.iter().map(|k| format!("{k}:fence")).collect();
        let tag = &token[..16];
        let request = ClaimAcquire {
            keys,
            fence_keys: &fence_keys,
            holds,
            token,
            ttl: TTL,
            fence_expiry: Duration::from_secs(600),
            bind_lineage: false,
            watch_clock: false,
            pubsub: PubSub::Classic,
            fenced: true,
            tag,
            on_refusal: OnRefusal::Mark,
            in_line: line.map(|(place, ticket)| InLine { place, ticket }),
        };
        let reply: ClaimAcquireReply = request.call().query(&mut self.conn).unwrap();
        request.check(reply).unwrap()
    }

    fn acquire(&mut self, hold: Hold, token: &str, line: Option<(&str, u64)>) -> ClaimAcquireReply {
        self.acquire_on(&[KEY], &[hold], token, line)
    }

    fn release_on(
        &mut self,
        keys: &[&str],
        holds: &[Hold],
        token: &str,
        line: Option<(&str, u64, bool)>,
    ) -> PerName {
        ClaimRelease {
            keys,
            holds,
            token,
            bound: false,
            pubsub: PubSub::Classic,
            announce: true,
            in_line: line.map(|(place, ticket, own)| (InLine { place, ticket }, own)),
        }
        .call()
        .query(&mut self.conn)
        .unwrap()
    }

    fn release(&mut self, hold: Hold, token: &str) -> bool {
        self.release_on(&[KEY], &[hold], token, None).all()
    }

    fn inspect(&mut self) -> Inspected {
        ClaimInspect {
            key: KEY,
            leader: None,
        }
        .call()
        .query(&mut self.conn)
        .unwrap()
    }

    fn get(&mut self, key: &str) -> Option<String> {
        command("GET").arg(key).query(&mut self.conn).unwrap()
    }

    fn queue(&mut self) -> Vec<String> {
        command("ZRANGE")
            .arg(format!("{KEY}:queue"))
            .arg(0)
            .arg(-1)
            .query(&mut self.conn)
            .unwrap()
    }

    /// A connection subscribed to the own channels of `KEY` and `KEY`b
    /// for the Locker tagged `tag(t)`, as its waiters' Locker is: a plain
    /// socket, whose reads may time out and go on.
    fn listen(&mut self, t: u8) {
        use std::io::Write;
        let mut stream = std::net::TcpStream::connect(self.node.addr()).unwrap();
        for key in [KEY, "t:{x}b"] {
            let own = format!("{key}:released:{}", tag(t));
            let line = format!("*2\r\n$9\r\nSUBSCRIBE\r\n${}\r\n{own}\r\n", own.len());
            stream.write_all(line.as_bytes()).unwrap();
        }
        self.listeners.push((tag(t), stream));
        // Both confirmed before anything is published to them.
        let mut subscribed = || {
            let own = format!("{KEY}:released:{}", tag(t));
            let n: Vec<redis::Value> = command("PUBSUB")
                .arg("NUMSUB")
                .arg(own)
                .query(&mut self.conn)
                .unwrap();
            n.get(1) == Some(&redis::Value::Int(1))
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(3);
        while !subscribed() {
            assert!(std::time::Instant::now() < deadline, "not subscribed");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The waiter ids the Locker tagged `tag(t)` was woken for since the
    /// last call (what has arrived within a moment).
    fn woken(&mut self, t: u8) -> Vec<String> {
        use std::io::Read;
        let (_, stream) = self
            .listeners
            .iter_mut()
            .find(|(tg, _)| *tg == tag(t))
            .expect("listening");
        stream
            .set_read_timeout(Some(Duration::from_millis(150)))
            .unwrap();
        let mut bytes = Vec::new();
        let mut buf = [0u8; 4096];
        for _ in 0..64 {
            match stream.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => bytes.extend_from_slice(&buf[..n]),
            }
        }
        // Each message is `message`, the channel and the payload
        // `ID:WINDOW:RELEASE`, a line each after its length.
        let text = String::from_utf8_lossy(&bytes).to_string();
        let lines: Vec<&str> = text.split("\r\n").collect();
        let mut ids = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            if *line == "message"
                && let Some(payload) = lines.get(i + 4)
            {
                ids.push(payload.split(':').next().unwrap_or_default().to_string());
            }
        }
        ids
    }
}

fn taken(reply: &ClaimAcquireReply) -> bool {
    matches!(reply, ClaimAcquireReply::Taken { .. })
}

fn refused_by(reply: &ClaimAcquireReply) -> Option<Owner> {
    match reply {
        ClaimAcquireReply::Held { owner, .. } => Some(Owner::of(*owner)),
        _ => None,
    }
}

fn run<T: FromRedisValue>(conn: &mut Connection, cmd: Cmd) -> T {
    cmd.query(conn).unwrap()
}

#[test]
fn a_lock_alone_is_taken_refused_and_given_back() {
    let mut f = fixture();
    let (a, b) = (token(1, 1), token(2, 2));
    assert!(taken(&f.acquire(Hold::Exclusive, &a, None)));
    assert_eq!(f.get(KEY).as_deref(), Some(a.as_str()));
    let refused = f.acquire(Hold::Exclusive, &b, None);
    assert!(
        matches!(refused_by(&refused), Some(Owner::Token(_))),
        "{refused:?}"
    );
    // Refused by another Locker's holder, a waiter marks it.
    assert_eq!(f.get(KEY), Some(format!("{a}*")));
    assert!(!f.release(Hold::Exclusive, &b), "never another's");
    assert!(f.release(Hold::Exclusive, &a));
    assert_eq!(f.get(KEY), None);
    assert!(!f.release(Hold::Exclusive, &a), "nothing left of ours");
}

/// A reader that arrives after a queued writer waits behind it; the
/// writer gets the lock when the readers before it leave, and the
/// readers in line go together after it, up to the next writer.
#[test]
fn every_mode_waits_in_arrival_order() {
    let mut f = fixture();
    f.listen(2);
    f.listen(3);
    let (r1, w, r2, r3, w2, r4) = (
        token(1, 1),
        token(2, 2),
        token(3, 3),
        token(3, 4),
        token(2, 5),
        token(3, 6),
    );
    assert!(taken(&f.acquire(Hold::Shared, &r1, None)));
    let (pw, pr2, pr3, pw2, pr4) = (
        place(2, 1),
        place(3, 2),
        place(3, 3),
        place(2, 4),
        place(3, 5),
    );
    assert_eq!(
        refused_by(&f.acquire(Hold::Exclusive, &w, Some((&pw, 100)))),
        Some(Owner::Readers)
    );
    // A newcomer reader is refused: a writer waits in line.
    assert!(!taken(&f.acquire(Hold::Shared, &token(4, 9), None)));
    for (p, t, ticket) in [(&pr2, &r2, 200), (&pr3, &r3, 300)] {
        assert!(!taken(&f.acquire(Hold::Shared, t, Some((p, ticket)))));
    }
    assert!(!taken(&f.acquire(Hold::Exclusive, &w2, Some((&pw2, 400)))));
    assert!(!taken(&f.acquire(Hold::Shared, &r4, Some((&pr4, 500)))));
    let spelled = |p: &str, h: &str| format!("{p}:{h}");
    assert_eq!(
        f.queue(),
        [
            spelled(&pw, "w"),
            spelled(&pr2, "r"),
            spelled(&pr3, "r"),
            spelled(&pw2, "w"),
            spelled(&pr4, "r")
        ]
    );

    // The last reader leaves: the writer alone is woken and reserved.
    assert!(f.release(Hold::Shared, &r1));
    assert_eq!(f.woken(2), ["1"]);
    assert_eq!(f.woken(3), Vec::<String>::new());
    assert_eq!(f.get(KEY), Some(format!("{pw}:w~")));
    assert!(!taken(&f.acquire(Hold::Shared, &r2, Some((&pr2, 200)))));
    assert!(taken(&f.acquire(Hold::Exclusive, &w, Some((&pw, 100)))));
    // Others wait in line: its value is marked, so its release serves them.
    assert_eq!(f.get(KEY), Some(format!("{w}*")));

    // The writer leaves: the two readers before the next writer go.
    assert!(f.release(Hold::Exclusive, &w));
    let mut woken = f.woken(3);
    woken.sort();
    assert_eq!(woken, ["2", "3"]);
    assert_eq!(f.woken(2), Vec::<String>::new());
    assert!(taken(&f.acquire(Hold::Shared, &r3, Some((&pr3, 300)))));
    assert!(taken(&f.acquire(Hold::Shared, &r2, Some((&pr2, 200)))));
    assert_eq!(f.queue(), [spelled(&pw2, "w"), spelled(&pr4, "r")]);
    // The reader behind the writer still waits.
    assert!(!taken(&f.acquire(Hold::Shared, &r4, Some((&pr4, 500)))));
    assert!(f.release(Hold::Shared, &r2));
    assert_eq!(f.woken(2), Vec::<String>::new(), "one reader is left");
    assert!(f.release(Hold::Shared, &r3));
    assert_eq!(f.woken(2), ["4"]);
}

/// A permit weight that does not fit stops the queue: smaller weights
/// behind it wait even where they would fit, so it is never starved.
#[test]
fn a_large_weight_is_not_overtaken_by_small_ones() {
    let mut f = fixture();
    f.listen(2);
    f.listen(3);
    let (a, big, small) = (token(1, 1), token(2, 2), token(3, 3));
    let (pbig, psmall) = (place(2, 1), place(3, 2));
    assert!(taken(&f.acquire(permits(4, 3), &a, None)));
    assert_eq!(f.inspect().members, 3, "a weight of 3 is 3 members");
    assert_eq!(
        refused_by(&f.acquire(permits(4, 3), &big, Some((&pbig, 100)))),
        Some(Owner::Semaphore(4))
    );
    // One permit is free, but the weight of 3 came first.
    assert!(!taken(&f.acquire(
        permits(4, 1),
        &small,
        Some((&psmall, 200))
    )));
    assert!(!taken(&f.acquire(permits(4, 1), &token(4, 4), None)));
    assert!(f.release(permits(4, 3), &a));
    assert_eq!(f.woken(2), ["1"]);
    assert_eq!(f.woken(3), ["2"], "with 3 reserved, 1 still fits");
    assert!(taken(&f.acquire(permits(4, 3), &big, Some((&pbig, 100)))));
    assert!(taken(&f.acquire(
        permits(4, 1),
        &small,
        Some((&psmall, 200))
    )));
    assert_eq!(f.inspect().members, 4);
    // Full: another permit waits; a semaphore of another size is told.
    assert!(!taken(&f.acquire(permits(4, 1), &token(4, 5), None)));
    assert_eq!(
        f.acquire(permits(5, 1), &token(4, 6), None),
        ClaimAcquireReply::PermitsDiffer { permits: 4 }
    );
    assert!(f.release(permits(4, 3), &big));
    assert_eq!(f.inspect().members, 1, "all 3 of its members went");
}

/// A waiter whose Locker no longer listens is passed over: at its turn
/// (the wake-up reaches nobody), and before it, when it blocks others
/// that would fit.
#[test]
fn a_waiter_that_is_gone_is_passed_over_in_every_mode() {
    let mut f = fixture();
    f.listen(3);
    let (r1, gone, r2, w) = (token(1, 1), token(2, 2), token(1, 3), token(3, 4));
    assert!(taken(&f.acquire(Hold::Shared, &r1, None)));
    // A writer of a Locker that is gone (tag 2 has no subscriber).
    assert!(!taken(&f.acquire(
        Hold::Exclusive,
        &gone,
        Some((&place(2, 1), 100))
    )));
    // A new reader passes it at once, and the place goes.
    assert!(taken(&f.acquire(Hold::Shared, &r2, None)));
    assert!(f.queue().is_empty());
    // At its turn: a live writer queued behind a gone one gets the lock.
    assert!(!taken(&f.acquire(
        Hold::Exclusive,
        &gone,
        Some((&place(2, 2), 100))
    )));
    assert!(!taken(&f.acquire(
        Hold::Exclusive,
        &w,
        Some((&place(3, 1), 200))
    )));
    assert!(f.release(Hold::Shared, &r1));
    assert!(f.release(Hold::Shared, &r2));
    assert_eq!(f.woken(3), ["1"]);
    assert!(f.queue().is_empty());
    assert!(taken(&f.acquire(
        Hold::Exclusive,
        &w,
        Some((&place(3, 1), 200))
    )));
}

/// A set waits in every name's queue at its ticket: where its turn has
/// come, the name is reserved for it while it waits for the others, and
/// it takes them all at once.
#[test]
fn a_set_takes_its_names_in_turn() {
    let mut f = fixture();
    f.listen(2);
    let (a, b) = ("t:{x}", "t:{x}b");
    let (holder, set, single) = (token(1, 1), token(2, 2), token(3, 3));
    let both = [Hold::Exclusive, Hold::Shared];
    assert!(taken(&f.acquire_on(
        &[b],
        &[Hold::Exclusive],
        &holder,
        None
    )));
    let p = place(2, 1);
    match f.acquire_on(&[a, b], &both, &set, Some((&p, 100))) {
        ClaimAcquireReply::Held { index: 1, .. } => {}
        other => panic!("{other:?}"),
    }
    // `a` is reserved for the set: a single locker waits.
    assert_eq!(f.get(a), Some(format!("{p}:w~")));
    assert!(!taken(&f.acquire_on(
        &[a],
        &[Hold::Exclusive],
        &single,
        None
    )));
    assert!(f.release_on(&[b], &[Hold::Exclusive], &holder, None).all());
    assert_eq!(f.woken(2), ["1"]);
    match f.acquire_on(&[a, b], &both, &set, Some((&p, 100))) {
        ClaimAcquireReply::Taken { fences, .. } => assert_eq!(fences.len(), 2),
        other => panic!("{other:?}"),
    }
    // Taken through the line: marked, so its release serves the line.
    assert_eq!(f.get(a), Some(format!("{set}*")));
    assert_eq!(f.get(b).as_deref(), Some("readers"));
    assert!(f.release_on(&[a, b], &both, &set, None).all());
}

/// A set waits in line for a prefix of its names in the canonical order
/// and the first it lacks, never past it: a taker that holds an earlier
/// name and asks for a later one (nesting in that order) gets it.
#[test]
fn a_set_is_in_line_no_further_than_the_first_name_it_lacks() {
    let mut f = fixture();
    f.listen(2);
    let (a, b) = ("t:{x}", "t:{x}b");
    let (nester, set) = (token(1, 1), token(2, 2));
    let both = [Hold::Exclusive, Hold::Exclusive];
    assert!(taken(&f.acquire_on(
        &[a],
        &[Hold::Exclusive],
        &nester,
        None
    )));
    let p = place(2, 1);
    match f.acquire_on(&[a, b], &both, &set, Some((&p, 100))) {
        ClaimAcquireReply::Held { index: 0, .. } => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(f.get(b), None, "nothing reserved past the name it lacks");
    assert!(taken(&f.acquire_on(
        &[b],
        &[Hold::Exclusive],
        &nester,
        None
    )));
    assert!(f.release_on(&[b], &[Hold::Exclusive], &nester, None).all());
    assert!(f.release_on(&[a], &[Hold::Exclusive], &nester, None).all());
    assert_eq!(f.woken(2), ["1"]);
    assert!(taken(&f.acquire_on(&[a, b], &both, &set, Some((&p, 100)))));
}
