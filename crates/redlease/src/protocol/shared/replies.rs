//! The read side's calls as the scripts read them, and its replies read
//! strictly, malformed ones included.

use super::*;

fn ints(items: &[i64]) -> Value {
    Value::Array(items.iter().map(|&i| Value::Int(i)).collect())
}

fn args(cmd: &Cmd) -> Vec<String> {
    cmd.args_iter()
        .map(|a| match a {
            redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            _ => "?".into(),
        })
        .collect()
}

pub(super) fn read_request() -> ReadAcquireRequest<'static> {
    ReadAcquireRequest {
        key: "app:{x}",
        set_key: "app:{x}:readers",
        fence_key: "app:{x}:fence",
        writer_key: "app:{x}:writer",
        token: "t0k3n",
        ttl: Duration::from_millis(1500),
        watch_clock: true,
        bind_lineage: false,
        pubsub: PubSub::Sharded,
        tag: "tag",
        on_refusal: OnRefusal::Mark,
        fenced: true,
        fence_expiry: Duration::from_secs(600),
    }
}

#[test]
fn the_keys_share_the_lock_keys_slot() {
    let keys = SharedKeys::of("app:{x}");
    assert_eq!(keys.readers, "app:{x}:readers");
    assert_eq!(keys.writer, "app:{x}:writer");
    // No token is hexadecimal-free.
    assert!(!READERS.chars().all(|c| c.is_ascii_hexdigit()));
}

#[test]
fn readers_have_one_fingerprint_on_every_node() {
    use crate::core::refusal::READERS_OWNER;
    use crate::protocol::set_nx::owner_of;
    assert_eq!(owner_of(READERS.as_bytes()), READERS_OWNER);
}

#[test]
fn calls_are_laid_out_as_the_scripts_read_them() {
    let read = read_request().call();
    assert_eq!(args(&read)[1], READ_ACQUIRE.hash());
    assert_eq!(
        args(&read)[2..],
        [
            "4",
            "app:{x}",
            "app:{x}:readers",
            "app:{x}:fence",
            "app:{x}:writer",
            "t0k3n",
            "1500",
            READERS,
            "1",
            "0",
            "SHARDNUMSUB",
            "tag",
            "1",
            "1",
            "600000"
        ]
    );
    let release = ReadReleaseRequest {
        key: "k",
        set_key: "k:readers",
        marker: READERS,
        announce_each: false,
        token: "t",
        bind_lineage: true,
        pubsub: PubSub::Classic,
        announce: false,
    };
    assert_eq!(
        args(&release.call())[2..],
        [
            "2",
            "k",
            "k:readers",
            "t",
            READERS,
            "1",
            "PUBLISH",
            "0",
            "0"
        ]
    );
    let extend = ReadExtendRequest {
        key: "k",
        set_key: "k:readers",
        marker: READERS,
        token: "t",
        ttl: Duration::from_secs(2),
        bind_lineage: false,
    };
    assert_eq!(
        args(&extend.call())[2..],
        ["2", "k", "k:readers", "t", "2000", READERS, "0"]
    );
    let mark = WriterWaitsRequest {
        key: "k",
        writer_key: "k:writer",
        token: "w",
        ttl: Duration::from_millis(900),
    };
    assert_eq!(
        args(&mark.call())[2..],
        ["2", "k", "k:writer", "w", "900", READERS]
    );
    let clear = WriterClearRequest {
        key: "k",
        writer_key: "k:writer",
        token: "w",
        pubsub: PubSub::Sharded,
        announce: true,
        holder: "",
    };
    assert_eq!(
        args(&clear.call())[2..],
        ["2", "k", "k:writer", "w", "SPUBLISH", "1", ""]
    );
    let inspect = ReadInspectRequest { key: "k" };
    assert_eq!(
        args(&inspect.call())[2..],
        ["4", "k", "k:readers", "k:writer", "k:permits", READERS]
    );
}

#[test]
fn read_acquire_replies_are_read_by_their_shape() {
    let read = |items: &[i64]| ReadAcquireReply::from_redis_value(ints(items));
    assert_eq!(
        read(&[1, 0]),
        Ok(ReadAcquireReply::Taken {
            generation: 0,
            clock: None
        })
    );
    assert_eq!(
        read(&[1, 42, 1_700_000_000, 250_000]),
        Ok(ReadAcquireReply::Taken {
            generation: 42,
            clock: Some(ServerTime {
                secs: 1_700_000_000,
                micros: 250_000
            })
        })
    );
    assert_eq!(
        read(&[0, 1200, 3, 0xa9993e3]),
        Ok(ReadAcquireReply::HeldByWriter {
            expires_in: Some(Duration::from_millis(1200)),
            waiting: 3,
            owner: 0xa9993e3
        })
    );
    assert_eq!(
        read(&[0, -1, -4, 0]),
        Ok(ReadAcquireReply::HeldByWriter {
            expires_in: None,
            waiting: 0,
            owner: 0
        })
    );
    assert_eq!(
        read(&[2, 800, 2, 0x61b7c8f]),
        Ok(ReadAcquireReply::WriterWaits {
            expires_in: Some(Duration::from_millis(800)),
            waiting: 2,
            owner: 0x61b7c8f,
        })
    );
}

#[test]
fn a_malformed_read_acquire_reply_is_an_error() {
    for reply in [
        ints(&[]),
        ints(&[1]),
        ints(&[1, 0, 5]),
        ints(&[1, -3]),
        ints(&[1, 1, -1, 0]),
        ints(&[0, 1200]),
        ints(&[0, 1200, 1]),
        ints(&[0, -2, 0, 0]),
        ints(&[0, 5, 0, -1]),
        ints(&[2, 800]),
        ints(&[2, -2, 0, 0]),
        ints(&[2, 800, 0]),
        ints(&[2, 800, 0, -1]),
        ints(&[3, 0]),
        ints(&[1, 0, 0, 0, 0]),
        Value::Array(vec![Value::Int(1), Value::BulkString(b"7".to_vec())]),
        Value::Int(1),
        Value::Nil,
    ] {
        let read = ReadAcquireReply::from_redis_value_ref(&reply);
        let e = read.expect_err(&format!("{reply:?}"));
        assert!(
            e.to_string().contains("the read acquire script returned"),
            "{e}"
        );
    }
}

#[test]
fn a_yes_must_answer_what_was_asked() {
    let taken = |clock| ReadAcquireReply::Taken {
        generation: 3,
        clock,
    };
    let clock = Some(ServerTime { secs: 1, micros: 2 });
    let req = read_request();
    assert!(req.check(taken(clock)).is_ok());
    assert!(req.check(taken(None)).is_err());
    let plain = ReadAcquireRequest {
        watch_clock: false,
        ..read_request()
    };
    assert!(plain.check(taken(None)).is_ok());
    assert!(plain.check(taken(clock)).is_err());
    let waits = ReadAcquireReply::WriterWaits {
        expires_in: None,
        waiting: 0,
        owner: 0,
    };
    assert_eq!(plain.check(waits), Ok(waits));
}

#[test]
fn yes_no_replies_are_read_strictly() {
    assert_eq!(
        ReadReleaseReply::from_redis_value(Value::Int(1)),
        Ok(ReadReleaseReply::Released)
    );
    assert_eq!(
        ReadExtendReply::from_redis_value(Value::Int(0)),
        Ok(ReadExtendReply::NotOurs)
    );
    assert_eq!(
        WriterMarkReply::from_redis_value(Value::Int(1)),
        Ok(WriterMarkReply::Marked)
    );
    assert_eq!(
        WriterClearReply::from_redis_value(Value::Int(0)),
        Ok(WriterClearReply::NotOurs)
    );
    for reply in [Value::Int(2), Value::Int(-1), Value::Nil, Value::Okay] {
        assert!(ReadReleaseReply::from_redis_value(reply.clone()).is_err());
        assert!(ReadExtendReply::from_redis_value(reply.clone()).is_err());
        assert!(WriterMarkReply::from_redis_value(reply.clone()).is_err());
        let e = WriterClearReply::from_redis_value(reply).unwrap_err();
        assert!(e.to_string().contains("writer-waiting clear"), "{e}");
    }
}

#[test]
fn inspect_replies_are_read_strictly() {
    let read = |items: &[i64]| SharedState::from_redis_value(ints(items));
    assert_eq!(
        read(&[0, -2, 0, -2, 0]),
        Ok(SharedState {
            mode: Mode::Free,
            expires_in: None,
            readers: 0,
            writer_waits: None
        })
    );
    assert_eq!(
        read(&[2, 1500, 3, 700, 0]),
        Ok(SharedState {
            mode: Mode::Shared,
            expires_in: Some(Duration::from_millis(1500)),
            readers: 3,
            writer_waits: Some(Some(Duration::from_millis(700)))
        })
    );
    assert_eq!(
        read(&[1, -1, 0, -1, 0]),
        Ok(SharedState {
            mode: Mode::Exclusive,
            expires_in: None,
            readers: 0,
            writer_waits: Some(None)
        })
    );
    assert_eq!(
        read(&[4, 800, 0, -2, 0]),
        Ok(SharedState {
            mode: Mode::Reserved,
            expires_in: Some(Duration::from_millis(800)),
            readers: 0,
            writer_waits: None
        })
    );
    assert_eq!(
        read(&[3, 900, 2, -2, 5]),
        Ok(SharedState {
            mode: Mode::Permits(5),
            expires_in: Some(Duration::from_millis(900)),
            readers: 2,
            writer_waits: None
        })
    );
    for reply in [
        ints(&[0, 100, 0, -2, 0]),
        ints(&[1, -2, 0, -2, 0]),
        ints(&[5, 100, 0, -2, 0]),
        ints(&[2, 100, -1, -2, 0]),
        ints(&[2, 100, 0, -3, 0]),
        ints(&[2, 100, 0, -2]),
        ints(&[2, 100, 0, -2, 3]),
        ints(&[3, 100, 0, -2, 0]),
        ints(&[2, 100, 0, -2, 0, 0]),
        Value::Int(0),
        Value::Nil,
    ] {
        let e = SharedState::from_redis_value(reply.clone()).expect_err(&format!("{reply:?}"));
        assert!(e.to_string().contains("the read inspect script"), "{e}");
    }
}
