use super::*;
use crate::history::{Mode, NotCounted, Op};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A lease of `lock` numbered `id`, by worker `id`: its acquire began 2
/// ms before it returned at `returned`; valid 10 s after that; released
/// from `release`; a single lock's unless `multi`.
fn lease(id: LeaseId, lock: usize, at: (u64, u64), token: u64, multi: Option<&Multi>) -> NameLease {
    let (returned, release) = at;
    NameLease {
        lease: RwLease {
            lock,
            mode: Mode::Write,
            lease: id,
            worker: id as usize,
            invoked: ms(returned - 2),
            returned: ms(returned),
            valid_until: ms(returned + 10_000),
            extended_until: None,
            release_began: Some(ms(release)),
            token: Some(token),
        },
        multi: multi.cloned(),
    }
}

fn multi(attempt: u64, locks: &[usize]) -> Multi {
    Multi {
        attempt,
        locks: locks.to_vec(),
    }
}

/// Every name of a multi-lease, numbered from `first`, each with a token
/// `token + lock`.
fn all(first: LeaseId, m: &Multi, at: (u64, u64), token: u64) -> Vec<NameLease> {
    m.locks
        .iter()
        .zip(first..)
        .map(|(&lock, id)| lease(id, lock, at, token + lock as u64, Some(m)))
        .collect()
}

/// Singles on locks 0 and 2, a multi-lease of 0, 1, 2 after them, singles
/// on 1 after it (one touching its release), another multi-lease of 1, 3.
fn clean() -> Vec<NameLease> {
    let a = multi(0, &[0, 1, 2]);
    let b = multi(1, &[1, 3]);
    let mut leases = vec![
        lease(1, 0, (10, 50), 10, None),
        lease(2, 2, (20, 60), 10, None),
    ];
    leases.extend(all(3, &a, (60, 100), 20));
    leases.push(lease(6, 1, (100, 150), 30, None)); // touches a's release
    leases.extend(all(7, &b, (200, 300), 40));
    leases
}

#[test]
fn a_clean_history_passes() {
    let v = check(&clean(), &[], &MultiConfig::default());
    assert_eq!(v.total(), 0, "{v:?}");
    assert_eq!(v.figures.single_leases, 3);
}

#[test]
fn a_single_lock_inside_a_multi_lease_is_flagged_on_that_name() {
    let mut leases = clean();
    // A single on lock 2 while multi-lease 0 holds 0, 1, 2.
    leases.push(lease(20, 2, (70, 80), 35, None));
    let v = check(&leases, &[], &MultiConfig::default());
    assert_eq!(v.name_overlap, 1, "{v:?}");
    let example = &v.examples["name_overlap"][0];
    assert!(
        example.starts_with("lock 2: lease 5 of lock_all #0 [0, 1, 2]")
            && example.contains("single lease 20"),
        "{example}"
    );
    // Two multi-leases that share a name overlap on it too, and only on it.
    let mut leases = clean();
    leases.extend(all(30, &multi(5, &[2, 3]), (90, 95), 100));
    let v = check(&leases, &[], &MultiConfig::default());
    assert_eq!(v.name_overlap, 1, "{v:?}");
    assert!(v.examples["name_overlap"][0].starts_with("lock 2:"));
}

#[test]
fn tokens_that_do_not_increase_per_name_are_flagged() {
    let mut leases = clean();
    // The single after multi-lease 0 on lock 1 gets a token below its.
    leases
        .iter_mut()
        .find(|l| l.lease.lease == 6)
        .unwrap()
        .lease
        .token = Some(21);
    let v = check(&leases, &[], &MultiConfig::default());
    assert_eq!((v.fencing, v.total()), (1, 1), "{v:?}");
    // Tokens of different names are not compared.
    let mut leases = clean();
    leases
        .iter_mut()
        .find(|l| l.lease.lease == 8)
        .unwrap()
        .lease
        .token = Some(1);
    assert_eq!(
        check(&leases, &[], &MultiConfig::default()).fencing,
        0,
        "lock 3's first lease may have any token"
    );
}

#[test]
fn a_multi_lease_returned_expired_counts_once() {
    let mut leases = all(0, &multi(0, &[0, 1, 2]), (100, 200), 1);
    for l in &mut leases {
        l.lease.valid_until = ms(90);
    }
    let v = check(&leases, &[], &MultiConfig::default());
    assert_eq!(v.expired_lease_returned, 1, "{v:?}");
}

#[test]
fn a_lease_without_every_name_or_token_asked_for_is_flagged() {
    let m = multi(0, &[0, 1, 2]);
    let mut leases = all(0, &m, (10, 20), 1);
    leases.pop();
    let v = check(&leases, &[], &MultiConfig::default());
    assert_eq!(v.partial_grant, 1, "{v:?}");
    assert!(v.examples["partial_grant"][0].contains("the lease holds [0, 1]"));
    let mut leases = all(0, &m, (10, 20), 1);
    leases[1].lease.token = None;
    assert_eq!(
        check(&leases, &[], &MultiConfig::default()).partial_grant,
        1
    );
    let unfenced = MultiConfig {
        fenced: false,
        ..MultiConfig::default()
    };
    assert_eq!(check(&leases, &[], &unfenced).partial_grant, 0);
}

/// A `lock_all` of locks 0 and 1 by worker 9 over `[began, ended]`.
fn wait(began: u64, ended: u64, granted: bool) -> MultiWait {
    MultiWait {
        worker: 9,
        multi: multi(50, &[0, 1]),
        began: ms(began),
        ended: ms(ended),
        granted,
    }
}

/// Singles on lock 1 back to back from `from` to `to`, each arriving 2
/// ms before it is let in, 100 ms each.
fn stream(from: u64, to: u64) -> Vec<NameLease> {
    (from..to)
        .step_by(100)
        .zip(100..)
        .map(|(t, id)| lease(id, 1, (t, t + 100), id, None))
        .collect()
}

fn bound(ms_: u64) -> MultiConfig {
    MultiConfig {
        starvation_bound: ms(ms_),
        ..MultiConfig::default()
    }
}

#[test]
fn a_lock_all_kept_out_by_later_single_lockers_is_starved() {
    // An earlier single holds lock 0 until 200; later singles hold lock 1
    // from 160 to 4160; the lock_all gives up at 4100.
    let mut leases = vec![lease(1, 0, (5, 200), 1, None)];
    leases.extend(stream(160, 4160));
    let v = check(&leases, &[wait(100, 4100, false)], &bound(3000));
    assert_eq!((v.multi_starved, v.total()), (1, 1), "{v:?}");
    assert!(v.examples["multi_starved"][0].contains("3900.0ms of it after the earlier holders"));
    assert_eq!(v.figures.max_kept_out, ms(3900));
    assert_eq!(v.figures.judged, (1, 1));
    // Below the bound it is only a figure.
    let v = check(&leases, &[wait(100, 4100, false)], &bound(4000));
    assert_eq!(v.multi_starved, 0);
    assert_eq!(v.figures.max_kept_out, ms(3900));
    // Process stalls are left out.
    let stalled = MultiConfig {
        stalls: vec![(ms(1000), ms(2000))],
        ..bound(3000)
    };
    assert_eq!(
        check(&leases, &[wait(100, 4100, false)], &stalled).multi_starved,
        0
    );
}

#[test]
fn a_long_wait_behind_earlier_holders_or_other_multi_leases_is_not() {
    // The holder of lock 0 was there first and held it 5 s.
    let leases = vec![lease(1, 0, (5, 5000), 1, None)];
    let v = check(&leases, &[wait(100, 5001, true)], &bound(1000));
    assert_eq!(v.total(), 0, "{v:?}");
    // Other multi-leases came later and held lock 1: not single lockers;
    // but they do not explain the wait either, so one later single among
    // them is enough.
    let mut leases = Vec::new();
    for (i, t) in (150..4150).step_by(100).enumerate() {
        leases.extend(all(
            100 + 2 * i as u64,
            &multi(i as u64, &[1, 2]),
            (t, t + 100),
            i as u64 * 10,
        ));
    }
    let v = check(&leases, &[wait(100, 4100, false)], &bound(1000));
    assert_eq!(v.multi_starved, 0, "{v:?}");
    leases.push(lease(99, 0, (3000, 3050), 1, None));
    let v = check(&leases, &[wait(100, 4100, false)], &bound(1000));
    assert_eq!(v.multi_starved, 1, "{v:?}");
    // The first multi-lease arrived within the grace: it explains 250 ms.
    assert_eq!(v.figures.max_kept_out, ms(3850));
    // Its own names' parts do not explain or starve it.
    let own = all(7, &multi(50, &[0, 1]), (4100, 4200), 1);
    let v = check(&own, &[wait(100, 4100, true)], &bound(1000));
    assert_eq!(v.total(), 0, "{v:?}");
    assert_eq!(v.figures.max_kept_out, Duration::ZERO);
}

/// The control's shape: a multi-lease of locks 0 and 1, one name's key
/// deleted under it, a single lock of that name taken while it is valid.
#[test]
fn the_controls_single_lock_on_a_name_of_a_held_multi_lease_is_flagged() {
    let mut leases = all(0, &multi(0, &[0, 1]), (10, 3000), 5);
    leases.push(lease(9, 1, (500, 600), 7, None));
    let v = check(&leases, &[], &MultiConfig::default());
    assert_eq!((v.name_overlap, v.total()), (1, 1), "{v:?}");
}

fn op(lease: Option<LeaseId>, lock: usize, call: Call, at: (u64, u64)) -> Op {
    Op {
        worker: 3,
        lock,
        lease,
        call,
        mode: Mode::Write,
        invoke: ms(at.0),
        complete: ms(at.1),
        bound: None,
        outcome: Outcome::Ok,
        valid_until: Some(ms(at.1 + 400)),
        token: Some(lock as u64 + 1),
        not_counted: NotCounted::default(),
        multi: None,
    }
}

#[test]
fn judge_reads_each_name_of_a_multi_lease_from_the_history() {
    let m = multi(4, &[1, 3]);
    let mut history: History = Vec::new();
    for (lock, id) in [(1, 10), (3, 11)] {
        let mut acquire = op(Some(id), lock, Call::Lock, (0, 30));
        acquire.multi = Some(m.clone());
        let mut release = op(Some(id), lock, Call::Release, (50, 52));
        release.multi = Some(m.clone());
        history.extend([acquire, release]);
    }
    let mut refused = op(None, 0, Call::TryLock, (60, 61));
    refused.multi = Some(multi(5, &[0, 2]));
    refused.outcome = Outcome::Failed(crate::history::ErrorKind::Taken, "held".into());
    history.push(refused);
    // A single on lock 3 inside the multi-lease.
    history.push(op(Some(12), 3, Call::TryLock, (38, 40)));
    let judged = MultiLocks {
        waits_judged: vec![3],
        starvation_bound: ms(3000),
        fenced: true,
        flagged_by: None,
    };
    let v = judge(&history, &judged, &[]);
    assert_eq!(v.name_overlap, 1, "{v:?}");
    assert_eq!((v.figures.waiting, v.figures.once), ((1, 1), (1, 0)));
    assert_eq!((v.figures.judged, v.figures.max_wait), ((1, 0), ms(30)));
    assert!(history[0].is_call() && !history[2].is_call() && history[4].is_call());
    let names = leases(&history);
    assert_eq!(names.len(), 3);
    assert_eq!(names.iter().filter(|n| n.multi.is_some()).count(), 2);
}
