use super::*;
use crate::examples::EXAMPLES;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A lease on lock 0 by worker `id`: its acquire began 2 ms before it
/// returned; valid 10 s after that unless changed; released from `release`.
fn lease(mode: Mode, id: LeaseId, returned: u64, release: Option<u64>, token: u64) -> RwLease {
    RwLease {
        lock: 0,
        mode,
        lease: id,
        worker: id as usize,
        invoked: ms(returned - 2),
        returned: ms(returned),
        valid_until: ms(returned + 10_000),
        extended_until: None,
        release_began: release.map(ms),
        token: Some(token),
    }
}

fn read(id: LeaseId, returned: u64, release: u64, generation: u64) -> RwLease {
    lease(Mode::Read, id, returned, Some(release), generation)
}

fn write(id: LeaseId, returned: u64, release: u64, token: u64) -> RwLease {
    lease(Mode::Write, id, returned, Some(release), token)
}

/// A writer (worker 99) waiting on lock 0 over `[began, ended]`.
fn wait(began: u64, ended: u64, lease: Option<LeaseId>) -> WriterWait {
    WriterWait {
        lock: 0,
        worker: 99,
        began: ms(began),
        ended: ms(ended),
        lease,
    }
}

/// Two readers together, a writer right after them, two readers that see
/// its generation, a second writer after them.
fn clean() -> (Vec<RwLease>, Vec<WriterWait>) {
    let mut r2 = read(2, 20, 120, 0);
    r2.invoked = ms(18); // 3 ms after the writer began: within the grace
    let leases = vec![
        read(1, 10, 100, 0),
        r2,
        write(3, 120, 200, 1), // touches r2's release
        read(4, 205, 250, 1),
        read(5, 210, 260, 1),
        write(6, 300, 350, 2),
    ];
    let waits = vec![wait(15, 120, Some(3)), wait(220, 300, Some(6))];
    (leases, waits)
}

#[test]
fn a_clean_history_passes() {
    let (leases, waits) = clean();
    let v = check(&leases, &waits, &RwConfig::default());
    assert_eq!(v.total(), 0, "{v:?}");
}

#[test]
fn a_writer_overlapping_a_reader_or_a_writer_is_flagged() {
    let (mut leases, waits) = clean();
    // A writer inside the holds of readers 4 [205, 250] and 5 [210, 260].
    leases.push(write(7, 240, 245, 3));
    let v = check(&leases, &waits, &RwConfig::default());
    assert_eq!(v.writer_overlap, 2, "{v:?}");
    let example = &v.examples["writer_overlap"][0];
    assert!(example.contains("read lease 4") && example.contains("write lease 7"));
    // A writer inside writer 6's hold [300, 350].
    let (mut leases, waits) = clean();
    leases.push(write(7, 340, 400, 3));
    let v = check(&leases, &waits, &RwConfig::default());
    assert_eq!(v.writer_overlap, 1, "{v:?}");
    assert!(v.examples["writer_overlap"][0].contains("write lease 6"));
}

#[test]
fn touching_intervals_do_not_overlap() {
    // The writer returned exactly when the reader began its release: no
    // overlap; a millisecond earlier: one.
    let mk = |returned| {
        let leases = [read(1, 10, 100, 0), write(2, returned, 200, 1)];
        check(&leases, &[], &RwConfig::default()).writer_overlap
    };
    assert_eq!(mk(100), 0);
    assert_eq!(mk(99), 1);
}

#[test]
fn expiry_and_extends_end_the_interval() {
    // Reader 1 never released: its validity [10, 60] ends it.
    let mut r = lease(Mode::Read, 1, 10, None, 0);
    r.valid_until = ms(60);
    let w = write(2, 80, 200, 1);
    assert_eq!(
        check(&[r.clone(), w.clone()], &[], &RwConfig::default()).writer_overlap,
        0
    );
    // Extended to 150: the writer at 80 overlaps it.
    r.extended_until = Some(ms(150));
    assert_eq!(check(&[r, w], &[], &RwConfig::default()).writer_overlap, 1);
}

#[test]
fn a_writer_that_skipped_the_readers_check_is_flagged() {
    // The negative control to come: readers hold, and a writer that does
    // not look at them is let in, twice.
    let leases = vec![
        read(1, 10, 500, 0),
        read(2, 20, 500, 0),
        write(3, 100, 150, 1),
        read(4, 160, 300, 1),
        write(5, 200, 250, 2),
    ];
    let v = check(&leases, &[], &RwConfig::default());
    // Writer 3 with readers 1 and 2; writer 5 with readers 1, 2 and 4.
    assert_eq!(v.writer_overlap, 5, "{v:?}");
    assert_eq!(v.examples["writer_overlap"].len(), EXAMPLES);
    assert_eq!(v.total(), 5, "nothing else is wrong with it: {v:?}");
}

#[test]
fn a_read_seeing_an_older_generation_than_a_committed_write_is_flagged() {
    let (mut leases, waits) = clean();
    // After writer 6 (token 2) ended at 350, a reader still sees 1.
    leases.push(read(7, 400, 450, 1));
    let v = check(&leases, &waits, &RwConfig::default());
    assert_eq!(v.stale_read, 1, "{v:?}");
    let example = &v.examples["stale_read"][0];
    assert!(example.contains("read lease 7") && example.contains("write lease 6"));
    // Generation 2, or a higher one (a writer that failed after bumping
    // it), is fine.
    for generation in [2, 5] {
        leases.last_mut().unwrap().token = Some(generation);
        assert_eq!(check(&leases, &waits, &RwConfig::default()).total(), 0);
    }
}

#[test]
fn a_read_is_judged_only_against_writes_ended_before_it_less_the_tolerance() {
    // Writer 1 [100, 200] token 5; readers that saw 4, returned 201 (within
    // the 2 ms tolerance), 202 (on its edge) and 203 (past it).
    let v = |returned| {
        let leases = [write(1, 100, 200, 5), read(2, returned, returned + 10, 4)];
        check(&leases, &[], &RwConfig::default()).stale_read
    };
    assert_eq!((v(201), v(202), v(203)), (0, 0, 1));
    // A writer that ended by expiry commits too.
    let mut w = lease(Mode::Write, 1, 100, None, 5);
    w.valid_until = ms(150);
    let leases = [w, read(2, 160, 170, 4)];
    assert_eq!(check(&leases, &[], &RwConfig::default()).stale_read, 1);
}

#[test]
fn a_read_returned_late_is_judged_from_its_validity() {
    // Writer 1 ended at 295; the reader returned at 300 (298 less the
    // tolerance) but was valid only until 294: the write may have been
    // granted after its holds had lapsed, so it is only returned expired.
    let mut r = read(2, 300, 310, 4);
    r.valid_until = ms(294);
    let mut leases = vec![write(1, 100, 295, 5), r];
    let v = check(&leases, &[], &RwConfig::default());
    assert_eq!((v.expired_lease_returned, v.stale_read), (1, 0), "{v:?}");
    // Valid until 296, it read stale as well.
    leases[1].valid_until = ms(296);
    let v = check(&leases, &[], &RwConfig::default());
    assert_eq!((v.expired_lease_returned, v.stale_read), (1, 1), "{v:?}");
}

#[test]
fn write_tokens_must_increase_in_the_order_returned() {
    for second in [1, 0] {
        let leases = [
            write(1, 10, 20, 1),
            read(2, 30, 40, 1),
            write(3, 50, 60, second),
        ];
        let v = check(&leases, &[], &RwConfig::default());
        assert_eq!(v.fencing, 1, "{v:?}");
        assert!(v.examples["fencing"][0].contains("write lease 3"));
    }
    // Read generations repeat freely.
    let leases = [read(1, 10, 20, 7), read(2, 30, 40, 7), write(3, 50, 60, 8)];
    assert_eq!(check(&leases, &[], &RwConfig::default()).total(), 0);
}

/// A stream of readers arriving every 200 ms from 200 ms, each holding
/// 300 ms, so they always overlap; the last one arrives at `until`.
fn reader_stream(first_id: LeaseId, until: u64) -> Vec<RwLease> {
    (0..)
        .map(|i| 200 + 200 * i)
        .take_while(|&t| t <= until)
        .zip(first_id..)
        .map(|(t, id)| read(id, t + 2, t + 302, 0))
        .collect()
}

#[test]
fn a_writer_kept_out_by_later_readers_is_starved() {
    let config = RwConfig {
        starvation_bound: ms(500),
        ..RwConfig::default()
    };
    // Began at 100, gave up at 3000: readers arriving after it kept the
    // lock shared the whole time.
    let leases = reader_stream(1, 2800);
    let v = check(&leases, &[wait(100, 3000, None)], &config);
    assert_eq!(v.writer_starved, 1, "{v:?}");
    let example = &v.examples["writer_starved"][0];
    assert!(
        example.contains("first: lease 1 arrived at 200.0ms"),
        "{example}"
    );
    // Got in at 3104 after the stream ended: starved all the same.
    let mut leases = reader_stream(1, 2800);
    leases.push(write(100, 3104, 3200, 1));
    let v = check(&leases, &[wait(100, 3104, Some(100))], &config);
    assert_eq!((v.writer_starved, v.total()), (1, 1), "{v:?}");
}

#[test]
fn a_long_wait_behind_earlier_readers_is_not_starvation() {
    let config = RwConfig {
        starvation_bound: ms(500),
        ..RwConfig::default()
    };
    // Reader 1 arrived before the writer and held 1 s; reader 2 arrived
    // 30 ms after the writer (within the grace) and held 3 s.
    let mut r2 = read(2, 140, 3100, 0);
    r2.invoked = ms(130);
    let mut leases = vec![read(1, 10, 1000, 0), r2, write(3, 3100, 3200, 1)];
    let waits = [wait(100, 3100, Some(3))];
    let v = check(&leases, &waits, &config);
    assert_eq!(v.total(), 0, "{v:?}");
    // A later reader got in meanwhile but left before reader 2: reader 2,
    // not it, kept the writer out.
    leases.push(read(4, 1000, 2000, 0));
    assert_eq!(check(&leases, &waits, &config).total(), 0);
    // Reader 2 arriving 60 ms after the writer (past the grace) kept it out
    // 2.1 s after reader 1 left: starvation.
    leases[1].invoked = ms(160);
    leases[1].returned = ms(162);
    let v = check(&leases, &waits, &config);
    assert_eq!(v.writer_starved, 1, "{v:?}");
    // Had reader 1 held until 3000, the later reader would have cost the
    // writer only 100 ms.
    leases[0].release_began = Some(ms(3000));
    assert_eq!(check(&leases, &waits, &config).total(), 0);
}

#[test]
fn a_long_wait_without_later_readers_is_not_starvation() {
    let config = RwConfig {
        starvation_bound: ms(500),
        ..RwConfig::default()
    };
    // No quorum for 3 s, nobody let in.
    assert_eq!(check(&[], &[wait(100, 3100, None)], &config).total(), 0);
    // Another writer that arrived later held it: not the readers' doing.
    let leases = [write(1, 200, 3000, 1), write(2, 3001, 3100, 2)];
    let waits = [wait(100, 3001, Some(2)), wait(150, 200, Some(1))];
    assert_eq!(check(&leases, &waits, &config).total(), 0);
}

#[test]
fn starvation_respects_the_bound_and_process_stalls() {
    // One later reader holds [300, 1000]; the writer gets in at 1000 after
    // waiting from 100: 900 ms kept out.
    let leases = [read(1, 300, 1000, 0), write(2, 1000, 1100, 1)];
    let waits = [wait(100, 1000, Some(2))];
    let bound = |b| RwConfig {
        starvation_bound: ms(b),
        ..RwConfig::default()
    };
    assert_eq!(check(&leases, &waits, &bound(900)).writer_starved, 0);
    assert_eq!(check(&leases, &waits, &bound(899)).writer_starved, 1);
    // 200 ms of it the whole process was stalled.
    let stalled = RwConfig {
        stalls: vec![(ms(400), ms(600))],
        ..bound(800)
    };
    assert_eq!(check(&leases, &waits, &stalled).writer_starved, 0);
}

#[test]
fn waits_are_judged_per_lock() {
    let config = RwConfig {
        starvation_bound: ms(500),
        ..RwConfig::default()
    };
    // The reader stream is on lock 1; the writer waits on lock 0.
    let mut leases = reader_stream(1, 2800);
    for l in &mut leases {
        l.lock = 1;
    }
    assert_eq!(check(&leases, &[wait(100, 3000, None)], &config).total(), 0);
}

#[test]
fn a_lease_returned_expired_is_flagged() {
    let mut w = write(1, 510, 520, 1);
    w.valid_until = ms(505);
    let v = check(&[w.clone()], &[], &RwConfig::default());
    assert_eq!(v.expired_lease_returned, 1, "{v:?}");
    assert!(v.examples["expired_lease_returned"][0].contains("write lease 1"));
    // Within the tolerance it is not; nor after a stall past valid_until.
    w.returned = ms(507);
    assert_eq!(check(&[w.clone()], &[], &RwConfig::default()).total(), 0);
    w.returned = ms(600);
    let stalled = RwConfig {
        stalls: vec![(ms(504), ms(599))],
        ..RwConfig::default()
    };
    assert_eq!(check(&[w], &[], &stalled).total(), 0);
}

/// A recorded call by worker `worker` on lock 0 over `[invoke, complete]`.
fn op(worker: usize, lease: Option<LeaseId>, call: Call, mode: Mode, at: (u64, u64)) -> Op {
    Op {
        worker,
        lock: 0,
        lease,
        call,
        mode,
        invoke: ms(at.0),
        complete: ms(at.1),
        bound: None,
        outcome: Outcome::Ok,
        valid_until: None,
        token: None,
        not_counted: crate::history::NotCounted::default(),
        multi: None,
    }
}

/// A granted acquire of `lease`, valid until `valid`, with `token`.
fn granted(lease: LeaseId, call: Call, mode: Mode, at: (u64, u64), valid: u64, token: u64) -> Op {
    let mut o = op(lease as usize, Some(lease), call, mode, at);
    o.valid_until = Some(ms(valid));
    o.token = Some(token);
    o
}

#[test]
fn leases_are_read_from_the_history_with_their_latest_validity() {
    let mut history = vec![
        // A reader kept alive: taken valid until 500, released at 900
        // when its renewals had moved validity to 1300.
        granted(1, Call::Lock, Mode::Read, (8, 10), 500, 3),
        op(1, Some(1), Call::Read, Mode::Read, (10, 11)),
        op(1, Some(1), Call::Release, Mode::Read, (900, 902)),
        // A writer extended to 800, then abandoned at 600.
        granted(2, Call::TryLock, Mode::Write, (20, 21), 520, 4),
        op(2, Some(2), Call::Extend, Mode::Write, (100, 102)),
        op(2, Some(2), Call::Abandon, Mode::Write, (600, 600)),
        // A failed acquire: no lease.
        op(3, None, Call::Lock, Mode::Write, (30, 530)),
    ];
    // The writer on another lock.
    for o in &mut history[3..6] {
        o.lock = 1;
    }
    history[2].valid_until = Some(ms(1300));
    history[4].valid_until = Some(ms(800));
    history[5].valid_until = Some(ms(800));
    history[6].outcome = Outcome::Failed(crate::history::ErrorKind::WaitTimeout, "x".into());
    let leases = leases(&history);
    assert_eq!(leases.len(), 2, "{leases:?}");
    let (r, w) = (&leases[0], &leases[1]);
    assert_eq!(
        (r.mode, r.token, r.invoked, r.returned),
        (Mode::Read, Some(3), ms(8), ms(10))
    );
    assert_eq!(
        (r.valid_until, r.extended_until, r.release_began),
        (ms(500), Some(ms(1300)), Some(ms(900)))
    );
    assert_eq!(
        (w.mode, w.extended_until, w.release_began),
        (Mode::Write, Some(ms(800)), Some(ms(600)))
    );
    // The reader held until 900 (not 500): a writer at 700 overlaps it.
    let mut late = leases.clone();
    late.push(RwLease {
        lock: 0,
        lease: 9,
        invoked: ms(698),
        returned: ms(700),
        valid_until: ms(1200),
        release_began: Some(ms(750)),
        token: Some(5),
        ..w.clone()
    });
    let v = check(&late, &[], &RwConfig::default());
    assert_eq!(v.writer_overlap, 1, "{v:?}");
    assert!(v.examples["writer_overlap"][0].contains("read lease 1"));
}

#[test]
fn writer_waits_are_the_waiting_write_locks_of_the_judged_workers() {
    let mut gave_up = op(7, None, Call::Lock, Mode::Write, (50, 3050));
    gave_up.outcome = Outcome::Failed(crate::history::ErrorKind::WaitTimeout, "x".into());
    let history = vec![
        granted(6, Call::Lock, Mode::Write, (10, 40), 500, 1),
        gave_up,
        granted(8, Call::Lock, Mode::Read, (10, 12), 500, 1),
        granted(9, Call::TryLock, Mode::Write, (60, 61), 500, 2),
    ];
    // Worker 6's and 7's write locks; not the read lock, not the try.
    let waits = writer_waits(&history, &[6, 7, 8, 9]);
    assert_eq!(
        waits,
        [
            WriterWait {
                lock: 0,
                worker: 6,
                began: ms(10),
                ended: ms(40),
                lease: Some(6)
            },
            WriterWait {
                lock: 0,
                worker: 7,
                began: ms(50),
                ended: ms(3050),
                lease: None
            },
        ]
    );
    assert_eq!(writer_waits(&history, &[7]).len(), 1);
    assert!(writer_waits(&history, &[]).is_empty());
}

#[test]
fn the_exclusive_checker_leaves_shared_leases_to_this_one() {
    use crate::checker::{self, Config, FinalState};
    // Two readers together, with the same generation: fine here; an
    // overlap and a token that did not increase to the exclusive checker.
    let history = vec![
        granted(1, Call::Lock, Mode::Read, (8, 10), 500, 3),
        op(1, Some(1), Call::Release, Mode::Read, (100, 101)),
        granted(2, Call::Lock, Mode::Read, (18, 20), 510, 3),
        op(2, Some(2), Call::Release, Mode::Read, (110, 111)),
    ];
    let state = FinalState::default();
    let exclusive = checker::check(&history, &state, &Config::default());
    assert_eq!(
        (exclusive.overlap, exclusive.fencing),
        (1, 1),
        "{exclusive:?}"
    );
    let read_write = Config {
        read_write: true,
        ..Config::default()
    };
    assert_eq!(checker::check(&history, &state, &read_write).total(), 0);
    let rw = ReadWrite {
        waits_judged: Vec::new(),
        starvation_bound: ms(2000),
        flagged_by: None,
    };
    assert_eq!(judge(&history, &rw, &[]).total(), 0);
}
