//! The multi-lock's reservations on a real server (acquire_all.lua,
//! unreserve.lua, and the releases that hand a claimed name over): a
//! refused waiter reserves the free names before the first held one and
//! claims that one, the claimed name's release makes it a reservation,
//! single lockers are refused by it, the waiter's grant uses it up, and a
//! waiter that gives up leaves nothing behind.

use std::time::Duration;

use redis::{Cmd, Connection, FromRedisValue};
use redlease_testkit::RedisNode;

use super::*;
use crate::protocol::lease::ReleaseRequest;
use crate::protocol::shared::{ReadReleaseRequest, READERS};

const LONG: Duration = Duration::from_secs(10);

/// A token as the library makes them: 48 hex digits, beginning with the
/// Locker's tag.
fn token(tag: &str, n: u32) -> String {
    format!("{tag}{n:046x}")
}

/// A command by name: test code, which the scan of the commands the
/// library sends (commands.rs) leaves out.
fn command(name: &str) -> Cmd {
    let mut cmd = Cmd::new();
    cmd.arg(name);
    cmd
}

fn run<T: FromRedisValue>(conn: &mut Connection, cmd: Cmd) -> T {
    cmd.query(conn).unwrap()
}

fn get(conn: &mut Connection, key: &str) -> Option<String> {
    let mut cmd = command("GET");
    cmd.arg(key);
    run(conn, cmd)
}

fn set(conn: &mut Connection, key: &str, value: &str) {
    let mut cmd = command("SET");
    cmd.arg(key).arg(value).arg("PX").arg(10_000);
    let () = run(conn, cmd);
}

/// The multi-lock of `keys` by `token`, waiting (reservation `mark`) or
/// not.
fn acquire_all(
    conn: &mut Connection,
    keys: &[&str],
    token: &str,
    mark: Option<&str>,
) -> AcquireAllReply {
    acquire_modes(conn, keys, &vec![Hold::Exclusive; keys.len()], token, mark)
}

/// [`acquire_all`] with a hold per key.
fn acquire_modes(
    conn: &mut Connection,
    keys: &[&str],
    holds: &[Hold],
    token: &str,
    mark: Option<&str>,
) -> AcquireAllReply {
    let request = AcquireAllRequest {
        holds,
        keys,
        fence_keys: &[],
        token,
        ttl: LONG,
        fence_expiry: Duration::from_secs(600),
        bind_lineage: false,
        watch_clock: false,
        pubsub: PubSub::Classic,
        tag: "aa",
        on_refusal: OnRefusal::Mark,
        reserve: mark,
    };
    let reply: AcquireAllReply = run(conn, ACQUIRE_ALL.whole(&request.call()));
    request.check(reply).unwrap()
}

fn release(conn: &mut Connection, key: &str, token: &str) -> i64 {
    let request = ReleaseRequest {
        key,
        token,
        announce: true,
        pubsub: PubSub::Classic,
        keep_turn: None,
    };
    run(conn, request.script().whole(&request.call()))
}

/// A reader's score that stays live for the test: a minute from now, in
/// Unix milliseconds (the server's clock is this machine's).
fn in_a_minute() -> u64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    now.unwrap().as_millis() as u64 + 60_000
}

/// `reader` holds `key` as a reader for a minute, as read_acquire.lua
/// leaves it: the readers marker in the lock key, the reader in its set.
fn hold_as_reader(conn: &mut Connection, key: &str, reader: &str) {
    set(conn, key, READERS);
    let mut zadd = command("ZADD");
    zadd.arg(format!("{key}:readers"))
        .arg(in_a_minute())
        .arg(reader);
    let _: i64 = run(conn, zadd);
}

fn held_at(reply: &AcquireAllReply) -> Option<usize> {
    match reply {
        AcquireAllReply::Held { index, .. } => Some(*index),
        AcquireAllReply::Taken { .. } => None,
    }
}

#[test]
fn a_claimed_name_is_handed_to_the_waiter_and_single_lockers_wait() {
    let node = RedisNode::start();
    let mut conn = node.client().get_connection().unwrap();
    let (a, b, c) = ("p{a}", "p{b}", "p{c}");
    let (holder, multi, mark) = (token("bb", 1), token("aa", 2), token("aa", 3));
    let reserved = format!("{mark}~");
    set(&mut conn, b, &holder);

    // Refused at b: a reserved, b claimed and its holder marked, c left.
    let refused = acquire_all(&mut conn, &[a, b, c], &multi, Some(&mark));
    assert_eq!(held_at(&refused), Some(1), "{refused:?}");
    assert_eq!(get(&mut conn, a).as_deref(), Some(&*reserved));
    assert_eq!(get(&mut conn, "p{b}:claim").as_deref(), Some(&*mark));
    assert_eq!(get(&mut conn, b), Some(format!("{holder}*")));
    assert_eq!(get(&mut conn, c), None);

    // A single locker's SET NX is refused by the reservation, and so is
    // another multi-lock, which claims nothing already claimed.
    let mut set_nx = command("SET");
    set_nx
        .arg(a)
        .arg(token("cc", 4))
        .arg("NX")
        .arg("PX")
        .arg(1000);
    let taken: Option<String> = run(&mut conn, set_nx);
    assert_eq!(taken, None);
    let other = acquire_all(&mut conn, &[b, c], &token("cc", 5), Some(&token("cc", 6)));
    assert_eq!(held_at(&other), Some(0));
    assert_eq!(get(&mut conn, "p{b}:claim").as_deref(), Some(&*mark));

    // The holder's release turns the claim into a reservation.
    assert_eq!(release(&mut conn, b, &holder), 1);
    assert_eq!(get(&mut conn, b).as_deref(), Some(&*reserved));
    assert_eq!(get(&mut conn, "p{b}:claim"), None);
    let mut pttl = command("PTTL");
    pttl.arg(b);
    let left: i64 = run(&mut conn, pttl);
    assert!(left > 0 && left <= 10_000, "the claim's lifetime: {left}");

    // The waiter's next attempt takes everything, the reserved names
    // marked so that their release is announced.
    let taken = acquire_all(&mut conn, &[a, b, c], &multi, Some(&mark));
    assert_eq!(held_at(&taken), None, "{taken:?}");
    assert_eq!(get(&mut conn, a), Some(format!("{multi}*")));
    assert_eq!(get(&mut conn, b), Some(format!("{multi}*")));
    assert_eq!(get(&mut conn, c).as_deref(), Some(&*multi));
    let mut release = ReleaseAllRequest {
        keys: &[a, b, c],
        token: &multi,
        pubsub: PubSub::Classic,
        announce: true,
        holds: &[Hold::Exclusive; 3],
    }
    .call();
    let done: String = run(&mut conn, RELEASE_ALL.whole(&release));
    assert_eq!(done, "111");
    release = command("DBSIZE");
    let left: i64 = run(&mut conn, release);
    assert_eq!(left, 0, "no reservation or claim is left");
}

#[test]
fn a_waiter_keeps_only_a_prefix_and_gives_everything_back() {
    let node = RedisNode::start();
    let mut conn = node.client().get_connection().unwrap();
    let (a, b, c) = ("p{a}", "p{b}", "p{c}");
    let (multi, mark) = (token("aa", 2), token("aa", 3));
    let reserved = format!("{mark}~");
    set(&mut conn, c, &token("bb", 1));
    let refused = acquire_all(&mut conn, &[a, b, c], &multi, Some(&mark));
    assert_eq!(held_at(&refused), Some(2));
    assert_eq!(get(&mut conn, b).as_deref(), Some(&*reserved));

    // a's reservation lapsed and another took a: the waiter's prefix
    // shrinks to nothing, b goes back (announced) and the claim moves.
    let mut del = command("DEL");
    del.arg(a);
    let _: i64 = run(&mut conn, del);
    set(&mut conn, a, &token("bb", 7));
    let refused = acquire_all(&mut conn, &[a, b, c], &multi, Some(&mark));
    assert_eq!(held_at(&refused), Some(0));
    assert_eq!(get(&mut conn, b), None);
    assert_eq!(get(&mut conn, "p{c}:claim"), None);
    assert_eq!(get(&mut conn, "p{a}:claim").as_deref(), Some(&*mark));

    // An attempt that will not wait reserves nothing.
    let mut del = command("DEL");
    del.arg(a).arg("p{a}:claim");
    let _: i64 = run(&mut conn, del);
    let lone = acquire_all(&mut conn, &[a, b, c], &multi, None);
    assert_eq!(held_at(&lone), Some(2));
    assert_eq!((get(&mut conn, a), get(&mut conn, b)), (None, None));
    assert_eq!(get(&mut conn, "p{c}:claim"), None);

    // The waiter gives up: its reservations and claim go.
    let _ = acquire_all(&mut conn, &[a, b, c], &multi, Some(&mark));
    assert_eq!(get(&mut conn, a).as_deref(), Some(&*reserved));
    let call = UnreserveRequest {
        keys: &[a, b, c],
        mark: &mark,
        pubsub: PubSub::Classic,
    }
    .call();
    let freed: u64 = run(&mut conn, UNRESERVE.whole(&call));
    assert_eq!(freed, 2);
    assert_eq!((get(&mut conn, a), get(&mut conn, b)), (None, None));
    assert_eq!(get(&mut conn, "p{c}:claim"), None);
    assert_eq!(get(&mut conn, c), Some(format!("{}*", token("bb", 1))));
}

#[test]
fn the_last_readers_release_hands_a_claimed_name_over() {
    let node = RedisNode::start();
    let mut conn = node.client().get_connection().unwrap();
    let (a, b) = ("p{a}", "p{b}");
    let (reader, multi, mark) = (token("bb", 1), token("aa", 2), token("aa", 3));
    hold_as_reader(&mut conn, b, &reader);
    let refused = acquire_all(&mut conn, &[a, b], &multi, Some(&mark));
    assert_eq!(held_at(&refused), Some(1));
    assert_eq!(
        get(&mut conn, b).as_deref(),
        Some(READERS),
        "readers unmarked"
    );
    let call = ReadReleaseRequest {
        key: b,
        set_key: "p{b}:readers",
        marker: READERS,
        announce_each: false,
        token: &reader,
        bind_lineage: false,
        pubsub: PubSub::Classic,
        announce: true,
    }
    .call();
    let _: i64 = run(&mut conn, crate::protocol::lua::READ_RELEASE.whole(&call));
    assert_eq!(get(&mut conn, b), Some(format!("{mark}~")));
    let taken = acquire_all(&mut conn, &[a, b], &multi, Some(&mark));
    assert_eq!(held_at(&taken), None, "{taken:?}");
}

fn zscore(conn: &mut Connection, key: &str, member: &str) -> Option<f64> {
    let mut cmd = command("ZSCORE");
    cmd.arg(key).arg(member);
    run(conn, cmd)
}

#[test]
fn read_holds_are_shared_with_readers_and_refused_by_writers() {
    let node = RedisNode::start();
    let mut conn = node.client().get_connection().unwrap();
    let (a, r) = ("p{a}", "p{r}");
    let holds = [Hold::Exclusive, Hold::Shared];
    let (reader, multi) = (token("bb", 1), token("aa", 2));
    // Another reader holds r: a multi-lock that only reads r joins it.
    hold_as_reader(&mut conn, r, &reader);
    let taken = acquire_modes(&mut conn, &[a, r], &holds, &multi, None);
    assert_eq!(held_at(&taken), None, "{taken:?}");
    assert_eq!(get(&mut conn, a).as_deref(), Some(&*multi));
    assert_eq!(get(&mut conn, r).as_deref(), Some(READERS));
    assert!(zscore(&mut conn, "p{r}:readers", &multi).is_some());
    // Giving it back leaves the other reader in, and r held by it.
    let call = ReleaseAllRequest {
        keys: &[a, r],
        token: &multi,
        pubsub: PubSub::Classic,
        announce: true,
        holds: &holds,
    }
    .call();
    let done: String = run(&mut conn, RELEASE_ALL.whole(&call));
    assert_eq!(done, "11");
    assert_eq!(get(&mut conn, a), None);
    assert_eq!(get(&mut conn, r).as_deref(), Some(READERS));
    assert!(zscore(&mut conn, "p{r}:readers", &multi).is_none());
    assert!(zscore(&mut conn, "p{r}:readers", &reader).is_some());

    // A waiting writer's mark keeps the set out of r...
    set(&mut conn, "p{r}:writer", &token("cc", 3));
    let refused = acquire_modes(&mut conn, &[a, r], &holds, &multi, None);
    assert_eq!(held_at(&refused), Some(1), "{refused:?}");
    assert_eq!(get(&mut conn, a), None, "nothing was taken");
    // ...and a set that wants r alone, refused by its readers, marks
    // itself waiting there (the writer's mark gone meanwhile).
    let mut del = command("DEL");
    del.arg("p{r}:writer");
    let _: i64 = run(&mut conn, del);
    let mark = token("aa", 4);
    let alone = [Hold::Exclusive, Hold::Exclusive];
    let refused = acquire_modes(&mut conn, &[a, r], &alone, &multi, Some(&mark));
    assert_eq!(held_at(&refused), Some(1));
    assert_eq!(get(&mut conn, "p{r}:writer").as_deref(), Some(&*mark));
    assert_eq!(get(&mut conn, "p{r}:claim").as_deref(), Some(&*mark));
    // The last reader's release hands r over; the set takes both alone,
    // and its mark is gone.
    let call = ReadReleaseRequest {
        key: r,
        set_key: "p{r}:readers",
        marker: READERS,
        announce_each: false,
        token: &reader,
        bind_lineage: false,
        pubsub: PubSub::Classic,
        announce: true,
    }
    .call();
    let _: i64 = run(&mut conn, crate::protocol::lua::READ_RELEASE.whole(&call));
    let taken = acquire_modes(&mut conn, &[a, r], &alone, &multi, Some(&mark));
    assert_eq!(held_at(&taken), None, "{taken:?}");
    assert_eq!(get(&mut conn, r), Some(format!("{multi}*")));
    assert_eq!(get(&mut conn, "p{r}:writer"), None);
    assert_eq!(get(&mut conn, "p{r}:claim"), None);
}

#[test]
fn a_read_name_that_readers_hold_is_never_reserved_over_them() {
    let node = RedisNode::start();
    let mut conn = node.client().get_connection().unwrap();
    // r (read by the set) is held by another reader; w (wanted alone) is
    // held by a writer: the set is refused at w and reserves before it,
    // but leaves r's key to its readers.
    let (r, w) = ("p{r}", "p{w}");
    let holds = [Hold::Shared, Hold::Exclusive];
    let (reader, multi, mark) = (token("bb", 1), token("aa", 2), token("aa", 3));
    hold_as_reader(&mut conn, r, &reader);
    set(&mut conn, w, &token("cc", 4));
    let refused = acquire_modes(&mut conn, &[r, w], &holds, &multi, Some(&mark));
    assert_eq!(held_at(&refused), Some(1), "{refused:?}");
    assert_eq!(
        get(&mut conn, r).as_deref(),
        Some(READERS),
        "the readers keep it"
    );
    assert_eq!(get(&mut conn, "p{w}:claim").as_deref(), Some(&*mark));
}

/// A reservation mark as reserve.rs draws them: a Locker's tag (16 hex
/// digits), the waiter's arrival ticket (16), random digits (16).
fn mark_at(tag: &str, ticket: u64, n: u64) -> String {
    format!("{tag:0>16}{ticket:016x}{n:016x}")
}

/// Two waiting sets whose refused attempts reach the nodes in different
/// orders (on node 0 the later one's arrives first, as when a lost packet
/// delays the earlier one's there): every node ends with the earlier
/// waiter's reservation and claim, not a split between the two with
/// neither on a quorum, and the holder's release hands the name to it
/// everywhere.
#[test]
fn waiters_that_reach_nodes_in_different_orders_are_served_by_arrival() {
    let nodes = redlease_testkit::RedisNodes::start(3);
    let mut conns: Vec<Connection> = nodes
        .iter()
        .map(|n| n.client().get_connection().unwrap())
        .collect();
    let (a, b) = ("p{a}", "p{b}");
    let holder = token("bb", 1);
    let (early, early_mark) = (token("cc", 2), mark_at("cc", 1_000, 7));
    let (late, late_mark) = (token("dd", 3), mark_at("dd", 2_000, 8));
    for conn in &mut conns {
        set(conn, b, &holder);
    }
    for (i, conn) in conns.iter_mut().enumerate() {
        let order = match i {
            0 => [(&late, &late_mark), (&early, &early_mark)],
            _ => [(&early, &early_mark), (&late, &late_mark)],
        };
        for (token, mark) in order {
            let refused = acquire_all(conn, &[a, b], token, Some(mark));
            assert!(held_at(&refused).is_some(), "node {i}: {refused:?}");
        }
    }
    for (i, conn) in conns.iter_mut().enumerate() {
        assert_eq!(
            get(conn, a),
            Some(format!("{early_mark}~")),
            "node {i}: a is the earlier waiter's"
        );
        assert_eq!(
            get(conn, "p{b}:claim").as_deref(),
            Some(&*early_mark),
            "node {i}: b is claimed by the earlier waiter"
        );
        let mut rank = command("ZRANK");
        rank.arg("p{b}:queue").arg(&late_mark);
        let queued: Option<i64> = run(conn, rank);
        assert_eq!(queued, None, "node {i}: the later claim left the queue");
    }

    // The holder lets go everywhere: b is the earlier waiter's on every
    // node, the later one is refused, the earlier one takes both.
    for conn in &mut conns {
        assert_eq!(release(conn, b, &holder), 1);
        assert_eq!(get(conn, b), Some(format!("{early_mark}~")));
        let refused = acquire_all(conn, &[a, b], &late, Some(&late_mark));
        assert_eq!(held_at(&refused), Some(0), "{refused:?}");
        let taken = acquire_all(conn, &[a, b], &early, Some(&early_mark));
        assert_eq!(held_at(&taken), None, "{taken:?}");
        assert_eq!(get(conn, a), Some(format!("{early}*")));
        assert_eq!(get(conn, b), Some(format!("{early}*")));
    }
}

/// A later waiter takes nothing of an earlier one's: not its reservation
/// (a reserved name counts as held) nor its claim, while an earlier
/// waiter takes over a later one's reservation as if the name were free.
#[test]
fn a_later_waiter_gives_way_and_an_earlier_one_takes_over() {
    let node = RedisNode::start();
    let mut conn = node.client().get_connection().unwrap();
    let (a, b, c) = ("p{a}", "p{b}", "p{c}");
    let (early, early_mark) = (token("cc", 2), mark_at("cc", 1_000, 7));
    let (late, late_mark) = (token("dd", 3), mark_at("dd", 2_000, 8));
    set(&mut conn, c, &token("bb", 1));

    // The later waiter reserves a and b and claims c.
    let refused = acquire_all(&mut conn, &[a, b, c], &late, Some(&late_mark));
    assert_eq!(held_at(&refused), Some(2));
    assert_eq!(get(&mut conn, b), Some(format!("{late_mark}~")));
    // The earlier one, wanting b alone, takes it over the reservation.
    let taken = acquire_all(&mut conn, &[b], &early, Some(&early_mark));
    assert_eq!(held_at(&taken), None, "{taken:?}");
    assert_eq!(get(&mut conn, b), Some(format!("{early}*")));
    // The later one is refused at b now; a stays its own.
    let refused = acquire_all(&mut conn, &[a, b, c], &late, Some(&late_mark));
    assert_eq!(held_at(&refused), Some(1));
    assert_eq!(get(&mut conn, a), Some(format!("{late_mark}~")));

    // An attempt without a reservation mark takes over nothing.
    let mut del = command("DEL");
    del.arg(b);
    let _: i64 = run(&mut conn, del);
    let lone = acquire_all(&mut conn, &[a], &token("ee", 4), None);
    assert_eq!(held_at(&lone), Some(0), "{lone:?}");

    // A later waiter leaves an earlier one's reservation and claim alone.
    let later_still = mark_at("ee", 3_000, 9);
    let refused = acquire_all(&mut conn, &[a, c], &token("ee", 5), Some(&later_still));
    assert_eq!(held_at(&refused), Some(0), "{refused:?}");
    assert_eq!(get(&mut conn, a), Some(format!("{late_mark}~")));
    let _ = acquire_all(&mut conn, &[a, b, c], &late, Some(&late_mark));
    assert_eq!(get(&mut conn, "p{c}:claim").as_deref(), Some(&*late_mark));
    let refused = acquire_all(&mut conn, &[c], &token("ee", 6), Some(&later_still));
    assert_eq!(held_at(&refused), Some(0));
    assert_eq!(get(&mut conn, "p{c}:claim").as_deref(), Some(&*late_mark));
}
