//! The read side's scripts on a real server: readers together, writers
//! alone, the writer-waiting mark, each reader expiring on its own, the
//! release announced, and force release clearing both modes. Every wait
//! is bounded.

use std::time::{Duration, Instant};

use redis::{Connection, FromRedisValue};
use redlease_testkit::RedisNode;

use super::*;
use crate::core::keys::{hash_slot, release_channel, LockKeys};
use crate::protocol::acquire::{AcquireRequest, AcquireScriptReply};
use crate::protocol::commands::{AclRule, Deployment};
use crate::protocol::lease::{
    ForceReleaseReply, ForceReleaseRequest, ReleaseReply, ReleaseRequest,
};
use crate::protocol::lua::{ACQUIRE, RELEASE};
use crate::protocol::set_nx::{self, owner_of, SetNx};

mod writer_mark;

const TAG: &str = "aa";
const LONG: Duration = Duration::from_secs(10);

/// A lock's keys on one server, and a connection with the scripts loaded.
struct Fixture {
    _node: RedisNode,
    conn: Connection,
    lock: String,
    fence: String,
    keys: SharedKeys,
    /// Connections subscribed to writers' own channels of the lock, as a
    /// waiting writer's Locker listens before it marks itself.
    listening: Vec<Connection>,
}

fn fixture() -> Fixture {
    let node = RedisNode::start();
    let mut conn = node.client().get_connection().unwrap();
    load_scripts(&mut conn);
    let lock_keys = LockKeys::new("rw:", "x", 86_400_000);
    Fixture {
        conn,
        lock: lock_keys.lock.to_string(),
        fence: lock_keys.fence(),
        keys: SharedKeys::of(&lock_keys.lock),
        listening: Vec::new(),
        _node: node,
    }
}

fn load_scripts(conn: &mut Connection) {
    for lua in [
        &*READ_ACQUIRE,
        &*READ_RELEASE,
        &*READ_EXTEND,
        &*WRITER_WAITS,
        &*WRITER_CLEAR,
        &*READ_INSPECT,
        &*ACQUIRE,
        &*RELEASE,
    ] {
        let sha: String = command("SCRIPT")
            .arg("LOAD")
            .arg(lua.code())
            .query(conn)
            .unwrap();
        assert_eq!(sha, lua.hash());
    }
}

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

impl Fixture {
    fn read<'a>(&'a self, token: &'a str, ttl: Duration) -> ReadAcquireRequest<'a> {
        ReadAcquireRequest {
            key: &self.lock,
            set_key: &self.keys.readers,
            fence_key: &self.fence,
            writer_key: &self.keys.writer,
            token,
            ttl,
            watch_clock: false,
            bind_lineage: false,
            pubsub: PubSub::Classic,
            tag: TAG,
            on_refusal: OnRefusal::Mark,
            fenced: true,
            fence_expiry: Duration::from_secs(600),
        }
    }

    fn acquire_read(&mut self, token: &str, ttl: Duration) -> ReadAcquireReply {
        let request = self.read(token, ttl).call();
        run(&mut self.conn, request)
    }

    fn release_read(&mut self, token: &str) -> ReadReleaseReply {
        let cmd = ReadReleaseRequest {
            key: &self.lock,
            set_key: &self.keys.readers,
            marker: READERS,
            announce_each: false,
            token,
            bind_lineage: false,
            pubsub: PubSub::Classic,
            announce: true,
        }
        .call();
        run(&mut self.conn, cmd)
    }

    fn extend_read(&mut self, token: &str, ttl: Duration) -> ReadExtendReply {
        let cmd = ReadExtendRequest {
            key: &self.lock,
            set_key: &self.keys.readers,
            marker: READERS,
            token,
            ttl,
            bind_lineage: false,
        }
        .call();
        run(&mut self.conn, cmd)
    }

    /// Marks the writer of `token` waiting, its Locker listening for the
    /// lock as a waiting writer's does.
    fn mark_writer(&mut self, token: &str, ttl: Duration) -> WriterMarkReply {
        self.listen_as(token);
        self.mark_writer_unheard(token, ttl)
    }

    /// Subscribes a connection to the own channel of the Locker whose
    /// tag begins `token`, unless one is already.
    fn listen_as(&mut self, token: &str) {
        let own = crate::core::keys::own_channel(&self.lock, &token[..16]);
        let mut probe = command("PUBSUB");
        probe.arg("NUMSUB").arg(&own);
        let (_, listeners): (String, u64) = run(&mut self.conn, probe);
        if listeners > 0 {
            return;
        }
        let mut conn = self._node.client().get_connection().unwrap();
        let _: Value = run(&mut conn, command("SUBSCRIBE").arg(&own).clone());
        self.listening.push(conn);
    }

    /// Marks the writer of `token` waiting, its Locker not listening.
    fn mark_writer_unheard(&mut self, token: &str, ttl: Duration) -> WriterMarkReply {
        let cmd = WriterWaitsRequest {
            key: &self.lock,
            writer_key: &self.keys.writer,
            token,
            ttl,
        }
        .call();
        run(&mut self.conn, cmd)
    }

    fn clear_writer(&mut self, token: &str, announce: bool) -> WriterClearReply {
        let cmd = WriterClearRequest {
            key: &self.lock,
            writer_key: &self.keys.writer,
            token,
            pubsub: PubSub::Classic,
            announce,
            holder: "",
        }
        .call();
        run(&mut self.conn, cmd)
    }

    fn clear_writer_took(&mut self, token: &str, holder: &str) -> WriterClearReply {
        let cmd = WriterClearRequest {
            key: &self.lock,
            writer_key: &self.keys.writer,
            token,
            pubsub: PubSub::Classic,
            announce: false,
            holder,
        }
        .call();
        run(&mut self.conn, cmd)
    }

    fn inspect(&mut self) -> SharedState {
        let cmd = ReadInspectRequest { key: &self.lock }.call();
        run(&mut self.conn, cmd)
    }

    fn acquire_write(&mut self, token: &str, fenced: bool) -> AcquireScriptReply {
        let cmd = AcquireRequest {
            key: &self.lock,
            fence_key: &self.fence,
            token,
            ttl: LONG,
            fence_expiry: Duration::from_secs(86_400),
            bind_lineage: false,
            watch_clock: false,
            pubsub: PubSub::Classic,
            fenced,
            tag: TAG,
            on_refusal: OnRefusal::Mark,
            queue: None,
        }
        .call();
        run(&mut self.conn, cmd)
    }

    fn set_nx(&mut self, token: &str) -> SetNx {
        let replies: Vec<Value> = set_nx::request(&self.lock, token, 10_000, false)
            .query(&mut self.conn)
            .unwrap();
        set_nx::parse(&replies, false).unwrap()
    }

    fn get(&mut self, key: &str) -> Option<String> {
        run(&mut self.conn, command("GET").arg(key).clone())
    }

    fn pttl(&mut self, key: &str) -> i64 {
        run(&mut self.conn, command("PTTL").arg(key).clone())
    }

    fn members(&mut self) -> u64 {
        run(
            &mut self.conn,
            command("ZCARD").arg(&self.keys.readers).clone(),
        )
    }
}

fn taken(generation: u64) -> ReadAcquireReply {
    ReadAcquireReply::Taken {
        generation,
        clock: None,
    }
}

/// A read taken on a node without a fencing counter: its generation is
/// the value a writer would restart the counter from, the server's clock
/// in microseconds cut to 100 ms (above every earlier token).
fn taken_without_counter(reply: ReadAcquireReply) {
    match reply {
        ReadAcquireReply::Taken {
            generation,
            clock: None,
        } => {
            let micros = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_micros() as u64;
            // Loopback servers share this machine's clock: within a minute.
            assert!(generation.abs_diff(micros) < 60_000_000, "{generation}");
            assert_eq!(generation % 100_000, 0, "{generation}");
        }
        other => panic!("not taken: {other:?}"),
    }
}

/// The next message `sub` hears, within its read timeout.
fn heard(sub: &mut redis::PubSub<'_>) -> Option<(String, String)> {
    let msg = sub.get_message().ok()?;
    Some((msg.get_channel_name().to_string(), msg.get_payload().ok()?))
}

/// Subscribes `conn` to the lock's release channel, and waits for at most
/// `wait` for each message.
fn subscribed<'a>(conn: &'a mut Connection, lock: &str, wait: Duration) -> redis::PubSub<'a> {
    let mut sub = conn.as_pubsub();
    sub.subscribe(release_channel(lock)).unwrap();
    sub.set_read_timeout(Some(wait)).unwrap();
    sub
}

#[test]
fn readers_hold_together_and_exclude_writers() {
    let mut f = fixture();
    let (a, b, w) = (token(TAG, 1), token(TAG, 2), token("bb", 3));
    taken_without_counter(f.acquire_read(&a, LONG));
    taken_without_counter(f.acquire_read(&b, LONG));
    assert_eq!(f.get(&f.lock.clone()).as_deref(), Some(READERS));
    let state = f.inspect();
    assert_eq!((state.mode, state.readers), (Mode::Shared, 2));
    assert!(state.expires_in.unwrap() > Duration::from_secs(9));
    assert_eq!(state.writer_waits, None);
    // Today's plain acquire and the acquire script are refused, and the
    // refusal names the readers as one owner.
    let readers = owner_of(READERS.as_bytes());
    // The readers restarted the missing counter, as a writer would.
    let counter = f.get(&f.fence.clone());
    assert!(counter.is_some());
    assert_eq!(f.set_nx(&w), SetNx::Held { owner: readers });
    match f.acquire_write(&w, true) {
        AcquireScriptReply::Held { owner, .. } => assert_eq!(owner, readers),
        other => panic!("a writer took a lock readers hold: {other:?}"),
    }
    // A refusal never marks the readers' value, and draws no token.
    assert_eq!(f.get(&f.lock.clone()).as_deref(), Some(READERS));
    assert_eq!(f.get(&f.fence.clone()), counter);
    // One reader leaving keeps the lock shared.
    assert_eq!(f.release_read(&a), ReadReleaseReply::Released);
    assert_eq!(f.release_read(&a), ReadReleaseReply::NotOurs);
    assert_eq!(f.inspect().readers, 1);
    assert!(matches!(f.set_nx(&w), SetNx::Held { .. }));
}

#[test]
fn a_writer_excludes_readers_and_its_token_is_their_generation() {
    let mut f = fixture();
    let (w, r) = (token("bb", 1), token(TAG, 2));
    let AcquireScriptReply::Taken {
        fence: Some(fence), ..
    } = f.acquire_write(&w, true)
    else {
        panic!("the writer did not take a free lock");
    };
    match f.acquire_read(&r, LONG) {
        ReadAcquireReply::HeldByWriter {
            expires_in, owner, ..
        } => {
            assert_eq!(owner, owner_of(w.as_bytes()));
            assert!(expires_in.unwrap() > Duration::from_secs(9));
        }
        other => panic!("a reader joined a writer: {other:?}"),
    }
    // A writer of another Locker is marked for its waiting readers.
    assert_eq!(f.get(&f.lock.clone()), Some(format!("{w}*")));
    assert_eq!(f.members(), 0);
    let release = ReleaseRequest {
        key: &f.lock,
        token: &w,
        announce: true,
        pubsub: PubSub::Classic,
        keep_turn: None,
    }
    .call();
    let released: ReleaseReply = run(&mut f.conn, release);
    assert_eq!(released, ReleaseReply::Released);
    // The reader sees the last write: its token, never a new one.
    let read = |f: &Fixture| {
        ReadAcquireRequest {
            watch_clock: true,
            ..f.read(&r, LONG)
        }
        .call()
    };
    let cmd = read(&f);
    let reply: ReadAcquireReply = run(&mut f.conn, cmd);
    let checked = ReadAcquireRequest {
        watch_clock: true,
        ..f.read(&r, LONG)
    }
    .check(reply);
    let reply = checked.unwrap();
    let ReadAcquireReply::Taken {
        generation,
        clock: Some(clock),
    } = reply
    else {
        panic!("{reply:?}");
    };
    assert_eq!(generation, fence);
    assert!(clock.secs > 1_600_000_000);
    let counter = f.get(&f.fence.clone()).unwrap();
    assert_eq!(counter, fence.to_string());
}

#[test]
fn a_crashed_reader_stops_counting_at_its_own_expiry() {
    let mut f = fixture();
    let (crashed, alive, w) = (token(TAG, 1), token(TAG, 2), token("bb", 3));
    let short = Duration::from_millis(200);
    taken_without_counter(f.acquire_read(&crashed, short));
    taken_without_counter(f.acquire_read(&alive, Duration::from_secs(5)));
    let deadline = Instant::now() + Duration::from_secs(3);
    while f.inspect().readers > 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let state = f.inspect();
    assert_eq!((state.mode, state.readers), (Mode::Shared, 1));
    assert!(state.expires_in.unwrap() > Duration::from_secs(3));
    // The crashed reader's hold is not revived, nor is it released.
    assert_eq!(f.extend_read(&crashed, LONG), ReadExtendReply::NotOurs);
    assert_eq!(f.members(), 1, "pruned, not re-added");
    assert_eq!(f.release_read(&crashed), ReadReleaseReply::NotOurs);
    assert!(matches!(f.set_nx(&w), SetNx::Held { .. }));
    // The live reader extends; a token that never read is refused.
    assert_eq!(f.extend_read(&alive, LONG), ReadExtendReply::Extended);
    assert!(f.pttl(&f.lock.clone()) > 9_000);
    assert!(f.pttl(&f.keys.readers.clone()) > 9_000);
    assert_eq!(f.extend_read(&w, LONG), ReadExtendReply::NotOurs);
    assert_eq!(f.members(), 1);
    // The last reader's release frees the lock and announces it.
    let mut listener = f._node.client().get_connection().unwrap();
    let mut sub = subscribed(&mut listener, &f.lock, Duration::from_secs(3));
    assert_eq!(f.release_read(&alive), ReadReleaseReply::Released);
    assert_eq!(
        heard(&mut sub),
        Some((
            release_channel(&f.lock),
            redis_sha1(&alive)[..16].to_string()
        ))
    );
    assert_eq!(f.pttl(&f.lock.clone()), -2);
    assert_eq!(f.pttl(&f.keys.readers.clone()), -2);
    assert_eq!(f.extend_read(&alive, LONG), ReadExtendReply::NotOurs);
    assert_eq!(f.inspect().mode, Mode::Free);
    assert_eq!(f.set_nx(&w), SetNx::Taken(None));
}

#[test]
fn readers_alone_expire_with_their_last_reader() {
    let mut f = fixture();
    let r = token(TAG, 1);
    taken_without_counter(f.acquire_read(&r, Duration::from_millis(150)));
    let (lock, readers) = (f.pttl(&f.lock.clone()), f.pttl(&f.keys.readers.clone()));
    assert!((1..=150).contains(&lock) && (1..=150).contains(&readers));
    let deadline = Instant::now() + Duration::from_secs(3);
    while f.pttl(&f.lock.clone()) != -2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(f.pttl(&f.lock.clone()), -2);
    assert_eq!(f.pttl(&f.keys.readers.clone()), -2);
}

#[test]
fn a_bound_reader_is_ours_only_in_its_lineage() {
    let mut f = fixture();
    let r = token(TAG, 1);
    let bound = ReadAcquireRequest {
        bind_lineage: true,
        ..f.read(&r, LONG)
    }
    .call();
    let reply: ReadAcquireReply = run(&mut f.conn, bound);
    taken_without_counter(reply);
    let members: Vec<String> = run(
        &mut f.conn,
        command("ZRANGE")
            .arg(&f.keys.readers)
            .arg(0)
            .arg(-1)
            .clone(),
    );
    assert!(members[0].starts_with(&format!("{r}|")), "{members:?}");
    // Unbound, the same token is not this reader.
    assert_eq!(f.extend_read(&r, LONG), ReadExtendReply::NotOurs);
    let extend = ReadExtendRequest {
        key: &f.lock,
        set_key: &f.keys.readers,
        marker: READERS,
        token: &r,
        ttl: LONG,
        bind_lineage: true,
    };
    let extended: ReadExtendReply = run(&mut f.conn, extend.call());
    assert_eq!(extended, ReadExtendReply::Extended);
    let release = ReadReleaseRequest {
        key: &f.lock,
        set_key: &f.keys.readers,
        marker: READERS,
        announce_each: false,
        token: &r,
        bind_lineage: true,
        pubsub: PubSub::Classic,
        announce: false,
    };
    let released: ReadReleaseReply = run(&mut f.conn, release.call());
    assert_eq!(released, ReadReleaseReply::Released);
    assert_eq!(f.inspect().mode, Mode::Free);
}

#[test]
fn all_of_a_names_keys_share_one_slot() {
    let f = fixture();
    let slot = hash_slot(&f.lock);
    assert_eq!(slot, hash_slot("x"));
    for key in [&f.fence, &f.keys.readers, &f.keys.writer] {
        assert_eq!(hash_slot(key), slot, "{key}");
    }
    assert_eq!(hash_slot(&release_channel(&f.lock)), slot);
}

#[test]
fn force_release_clears_both_modes() {
    let mut f = fixture();
    let (r, w) = (token(TAG, 1), token("bb", 2));
    assert!(matches!(
        f.acquire_write(&w, true),
        AcquireScriptReply::Taken { .. }
    ));
    let force = |f: &mut Fixture| -> ForceReleaseReply {
        let channel = release_channel(&f.lock);
        let cmd = ForceReleaseRequest {
            key: &f.lock,
            channel: &channel,
            release_id: "forced",
            pubsub: PubSub::Classic,
        }
        .call();
        run(&mut f.conn, cmd)
    };
    assert_eq!(force(&mut f), ForceReleaseReply::Deleted);
    assert_eq!(
        f.acquire_read(&r, LONG),
        taken(f.get(&f.fence.clone()).unwrap().parse().unwrap())
    );
    assert_eq!(f.mark_writer(&w, LONG), WriterMarkReply::Marked);
    let mut listener = f._node.client().get_connection().unwrap();
    let mut sub = subscribed(&mut listener, &f.lock, Duration::from_secs(3));
    assert_eq!(force(&mut f), ForceReleaseReply::Deleted);
    assert_eq!(
        heard(&mut sub),
        Some((release_channel(&f.lock), "forced".to_string()))
    );
    for key in [
        f.lock.clone(),
        f.keys.readers.clone(),
        f.keys.writer.clone(),
    ] {
        assert_eq!(f.pttl(&key), -2, "{key}");
    }
    // The fencing counter stays, so tokens keep growing.
    assert!(f.get(&f.fence.clone()).is_some());
    assert_eq!(force(&mut f), ForceReleaseReply::NoKey);
    assert_eq!(f.inspect().mode, Mode::Free);
}

/// A user with exactly the library's rule runs every read-side script.
#[test]
fn the_least_privilege_user_runs_the_read_side() {
    let mut f = fixture();
    let rule = AclRule::new(Deployment::Standalone)
        .key_prefix("rw:")
        .user("reader", "pw");
    let () = run(&mut f.conn, command("ACL").arg(rule.args()).clone());
    let mut admin = std::mem::replace(
        &mut f.conn,
        redis::Client::open(format!("redis://reader:pw@{}", f._node.addr()))
            .unwrap()
            .get_connection()
            .unwrap(),
    );
    let () = run(&mut admin, command("ACL").arg("LOG").arg("RESET").clone());
    let (r, w) = (token(TAG, 1), token("bb", 2));
    taken_without_counter(f.acquire_read(&r, LONG));
    assert_eq!(f.extend_read(&r, LONG), ReadExtendReply::Extended);
    assert_eq!(f.mark_writer(&w, LONG), WriterMarkReply::Marked);
    assert_eq!(f.inspect().readers, 1);
    assert_eq!(f.clear_writer(&w, true), WriterClearReply::Cleared);
    assert_eq!(f.release_read(&r), ReadReleaseReply::Released);
    let log: Vec<Value> = run(&mut admin, command("ACL").arg("LOG").clone());
    assert!(log.is_empty(), "refused: {log:?}");
}

fn redis_sha1(text: &str) -> String {
    sha1_smol::Sha1::from(text).digest().to_string()
}
