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
