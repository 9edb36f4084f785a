//! The writer-waiting mark on a real server: it holds new readers off
//! while the writer waits and its Locker listens, goes when the writer
//! takes the lock or gives up, and passes readers' wish to be told on to
//! the writer's lease.

use std::time::{Duration, Instant};

use super::*;

#[test]
fn a_waiting_writer_holds_new_readers_off_until_its_mark_ends() {
    let mut f = fixture();
    let (a, b, w, v) = (token(TAG, 1), token(TAG, 2), token("bb", 3), token("cc", 4));
    // No mark while the lock is not the readers'.
    assert_eq!(f.mark_writer(&w, LONG), WriterMarkReply::NotShared);
    taken_without_counter(f.acquire_read(&a, LONG));
    let bound = Duration::from_millis(300);
    assert_eq!(f.mark_writer(&w, bound), WriterMarkReply::Marked);
    let marked = Instant::now();
    match f.acquire_read(&b, LONG) {
        ReadAcquireReply::WriterWaits { expires_in, .. } => {
            assert!(expires_in.unwrap() <= bound);
        }
        other => panic!("a reader passed a waiting writer: {other:?}"),
    }
    let state = f.inspect();
    assert!(state.writer_waits.unwrap().unwrap() <= bound);
    assert_eq!((state.mode, state.readers), (Mode::Shared, 1));
    // Only the writer's own token clears its mark.
    assert_eq!(f.clear_writer(&v, true), WriterClearReply::NotOurs);
    assert!(matches!(
        f.acquire_read(&b, LONG),
        ReadAcquireReply::WriterWaits { .. }
    ));
    // A writer that vanished leaves no mark beyond its bound.
    let deadline = Instant::now() + Duration::from_secs(3);
    let joined = loop {
        match f.acquire_read(&b, LONG) {
            ReadAcquireReply::WriterWaits { .. } if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            other => break other,
        }
    };
    taken_without_counter(joined);
    assert!(marked.elapsed() >= bound - Duration::from_millis(50));
    assert_eq!(f.inspect().readers, 2);
    // A writer giving up clears its mark and tells the readers behind it.
    assert_eq!(f.mark_writer(&w, LONG), WriterMarkReply::Marked);
    let mut listener = f._node.client().get_connection().unwrap();
    let mut sub = subscribed(&mut listener, &f.lock, Duration::from_secs(3));
    assert_eq!(f.clear_writer(&w, true), WriterClearReply::Cleared);
    let id = &redis_sha1(&w)[..16];
    assert_eq!(
        heard(&mut sub),
        Some((release_channel(&f.lock), id.to_string()))
    );
    assert_eq!(f.pttl(&f.keys.writer.clone()), -2);
    taken_without_counter(f.acquire_read(&v, LONG));
    // A writer that took the lock clears it silently.
    assert_eq!(f.mark_writer(&w, LONG), WriterMarkReply::Marked);
    assert_eq!(f.clear_writer(&w, false), WriterClearReply::Cleared);
    assert_eq!(f.clear_writer(&w, false), WriterClearReply::NotOurs);
    sub.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    // (Nothing published: only a timeout ends the wait.)
    assert_eq!(heard(&mut sub), None);
}

/// A writer's mark holds readers off only while the writer's Locker
/// listens for the lock (its own channel): one whose process or
/// connection ended is passed over at once, and its mark deleted. A
/// waiting multi-lock's mark, whose claim names it, stays.
#[test]
fn a_writer_that_no_longer_listens_holds_no_reader_off() {
    let mut f = fixture();
    let (a, b, w) = (token(TAG, 1), token(TAG, 2), token("bb", 3));
    taken_without_counter(f.acquire_read(&a, LONG));
    assert_eq!(f.mark_writer_unheard(&w, LONG), WriterMarkReply::Marked);
    taken_without_counter(f.acquire_read(&b, LONG));
    assert_eq!(f.pttl(&f.keys.writer.clone()), -2, "the mark was deleted");
    // Listening, it holds them off; once its connection closes, no more.
    assert_eq!(f.mark_writer(&w, LONG), WriterMarkReply::Marked);
    let c = token(TAG, 4);
    assert!(matches!(
        f.acquire_read(&c, LONG),
        ReadAcquireReply::WriterWaits { .. }
    ));
    f.listening.clear();
    let deadline = Instant::now() + Duration::from_secs(3);
    let joined = loop {
        match f.acquire_read(&c, LONG) {
            // The server notices the closed connection a moment later.
            ReadAcquireReply::WriterWaits { .. } if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            other => break other,
        }
    };
    taken_without_counter(joined);
    // A multi-lock's claim on the name keeps its mark, listening or not.
    let (m, d) = (token("dd", 5), token(TAG, 6));
    assert_eq!(f.mark_writer_unheard(&m, LONG), WriterMarkReply::Marked);
    let claim = format!("{}:claim", f.lock);
    let () = run(&mut f.conn, command("SET").arg(&claim).arg(&m).clone());
    assert!(matches!(
        f.acquire_read(&d, LONG),
        ReadAcquireReply::WriterWaits { .. }
    ));
}

/// Readers of another Locker wait behind a writer's mark: when the writer
/// takes the lock (with a lease token other than its mark's), clearing
/// the mark passes their wish on to its lease's value, so its release is
/// published to them. Without such readers, the value is left alone.
#[test]
fn a_writer_that_took_the_lock_will_be_heard_by_the_readers_behind_it() {
    for readers_wait in [true, false] {
        let mut f = fixture();
        let (a, v) = (token(TAG, 1), token("cc", 2));
        let (mark, lease) = (token("bb", 3), token("bb", 4));
        taken_without_counter(f.acquire_read(&a, LONG));
        assert_eq!(f.mark_writer(&mark, LONG), WriterMarkReply::Marked);
        if readers_wait {
            assert!(matches!(
                f.acquire_read(&v, LONG),
                ReadAcquireReply::WriterWaits { .. }
            ));
            assert_eq!(f.get(&f.keys.writer.clone()), Some(format!("{mark}*")));
            // The writer's refreshed mark keeps the readers' wish.
            assert_eq!(f.mark_writer(&mark, LONG), WriterMarkReply::Marked);
            assert_eq!(f.get(&f.keys.writer.clone()), Some(format!("{mark}*")));
        }
        assert_eq!(f.release_read(&a), ReadReleaseReply::Released);
        assert_eq!(f.set_nx(&lease), SetNx::Taken(None));
        assert_eq!(
            f.clear_writer_took(&mark, &lease),
            WriterClearReply::Cleared
        );
        let value = f.get(&f.lock.clone()).unwrap();
        match readers_wait {
            true => assert_eq!(value, format!("{lease}*")),
            false => assert_eq!(value, lease),
        }
        assert_eq!(f.pttl(&f.keys.writer.clone()), -2);
    }
}
