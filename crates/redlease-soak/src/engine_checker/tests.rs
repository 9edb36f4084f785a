use super::*;
use crate::history::{NotCounted, Op};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn want(lock: usize, mode: Mode) -> Want {
    Want {
        lock,
        mode,
        weight: 1,
    }
}

fn permit(lock: usize, weight: u32) -> Want {
    Want {
        lock,
        mode: Mode::Permit,
        weight,
    }
}

/// A call of `worker` that waits (up to 3 s, node timeout 40 ms: slacks
/// of 130 ms) for `wants` over `[arrived, ended]`; granted as `leases`
/// (lock, lease) unless empty, then it gave up (`WaitTimeout`).
fn asked(worker: usize, wants: &[Want], at: (u64, u64), leases: &[(usize, LeaseId)]) -> Asked {
    Asked {
        worker,
        waits: true,
        set: wants.len() > 1,
        wants: wants.to_vec(),
        arrived: ms(at.0),
        ended: ms(at.1),
        wait: ms(3000),
        node_timeout: ms(40),
        leases: leases.to_vec(),
        error: leases.is_empty().then_some(ErrorKind::WaitTimeout),
        node_errors: 0,
    }
}

/// Lease `id` of `lock` in `mode`: returned at `at.0`, released from
/// `at.1`, valid 10 s.
fn lease(id: LeaseId, lock: usize, mode: Mode, at: (u64, u64)) -> RwLease {
    RwLease {
        lock,
        mode,
        lease: id,
        worker: id as usize,
        invoked: ms(at.0.saturating_sub(2)),
        returned: ms(at.0),
        valid_until: ms(at.0 + 10_000),
        extended_until: None,
        release_began: Some(ms(at.1)),
        token: None,
    }
}

fn config() -> EngineConfig {
    EngineConfig::default()
}

/// The default checker, with `disturbances`.
fn faulted(disturbances: Vec<Disturbance>) -> EngineConfig {
    EngineConfig {
        disturbances,
        ..EngineConfig::default()
    }
}

/// A holder (worker 0) of lock 0 over [0, 900]; a writer (1) arrives at
/// 100 and waits; another (2) arrives at 300 and is granted at 400, before
/// the first, which is granted at 900 (when worker 2 let go).
fn overtaken_writer() -> Vec<Asked> {
    vec![
        asked(0, &[want(0, Mode::Write)], (0, 1), &[(0, 1)]),
        asked(1, &[want(0, Mode::Write)], (100, 900), &[(0, 2)]),
        asked(2, &[want(0, Mode::Write)], (300, 400), &[(0, 3)]),
    ]
}

fn overtaken_leases() -> Vec<RwLease> {
    vec![
        lease(1, 0, Mode::Write, (1, 395)),
        lease(2, 0, Mode::Write, (900, 950)),
        lease(3, 0, Mode::Write, (400, 890)),
    ]
}

#[test]
fn a_later_writer_granted_before_a_waiting_one_is_overtaken() {
    let v = check(&overtaken_leases(), &overtaken_writer(), &config());
    assert_eq!((v.overtaken, v.total()), (1, 1), "{v:?}");
    let write = &v.figures.kinds["write"];
    assert_eq!((write.judged, write.overtaken), (3, (1, 1)), "{v:?}");
    let (still, worst) = v.figures.worst_overtake.clone().unwrap();
    assert_eq!(still, ms(500));
    assert!(
        worst.contains("lock of lock 0 (worker 1) arrived at 100.0ms"),
        "{worst}"
    );
    // In arrival order: the later one granted after the first let go.
    let mut in_order = overtaken_writer();
    in_order[1].ended = ms(400);
    in_order[2].ended = ms(900);
    let leases = vec![
        lease(1, 0, Mode::Write, (1, 395)),
        lease(2, 0, Mode::Write, (400, 890)),
        lease(3, 0, Mode::Write, (900, 950)),
    ];
    let v = check(&leases, &in_order, &config());
    assert_eq!(v.total(), 0, "{v:?}");
    assert_eq!((v.figures.contended, v.figures.out_of_order), (1, 0));
}

#[test]
fn incompatible_grants_need_no_slack_but_arrivals_do() {
    // The later writer returns 1 ms before the earlier one: overtaken.
    let mut asked = overtaken_writer();
    asked[1].ended = ms(401);
    let v = check(&[], &asked, &config());
    assert_eq!(v.overtaken, 1, "{v:?}");
    // Arrived within the first one's arrival slack (2 x 40 + 50 ms):
    // the servers may have seen it first.
    asked[2].arrived = ms(100 + 130);
    let v = check(&[], &asked, &config());
    assert_eq!(v.overtaken, 0, "{v:?}");
    asked[2].arrived = ms(100 + 131);
    assert_eq!(check(&[], &asked, &config()).overtaken, 1);
}

#[test]
fn compatible_readers_granted_together_within_the_slack_are_not_overtaken() {
    // A writer holds until 500; readers arrive at 100 and 300 and are
    // woken together: the later one's grant lands first, by 120 ms.
    let readers = |first_granted: u64| {
        vec![
            asked(0, &[want(0, Mode::Write)], (0, 1), &[(0, 1)]),
            asked(1, &[want(0, Mode::Read)], (100, first_granted), &[(0, 2)]),
            asked(2, &[want(0, Mode::Read)], (300, 500), &[(0, 3)]),
        ]
    };
    let v = check(&[], &readers(620), &config());
    assert_eq!(v.total(), 0, "{v:?}");
    // 131 ms later: beyond the grant slack, the earlier reader was kept
    // waiting behind the later one.
    let v = check(&[], &readers(631), &config());
    assert_eq!(v.overtaken, 1, "{v:?}");
    assert_eq!(v.figures.kinds["read"].overtaken, (1, 1));
    // A reader passed by a later writer needs no slack: overtaken.
    let mut passed = readers(560);
    passed[2].wants = vec![want(0, Mode::Write)];
    assert_eq!(check(&[], &passed, &config()).overtaken, 1);
}

#[test]
fn small_permits_passing_a_large_waiting_one_are_overtaken() {
    // N = 3: two permits held; a weight-2 waiter arrives at 100; weight-1
    // permits that arrive later take the one free permit, again and again.
    let mut config = config();
    config.capacity.insert(5, 3);
    let mut asked = vec![
        asked(0, &[permit(5, 2)], (100, 2000), &[(5, 10)]),
        asked(1, &[permit(5, 1)], (300, 310), &[(5, 11)]),
        asked(2, &[permit(5, 1)], (600, 610), &[(5, 12)]),
    ];
    let v = check(&[], &asked, &config);
    assert_eq!(v.overtaken, 2, "{v:?}");
    assert_eq!(v.figures.kinds["permit"].overtaken, (1, 2));
    // Two that fit together, granted by one release within the slack.
    asked[0].ended = ms(400);
    let v = check(&[], &asked, &config);
    assert_eq!(v.overtaken, 0, "{v:?}");
}

#[test]
fn a_set_passed_on_its_first_name_is_overtaken() {
    // A set of lock 0 (read) and 1 (write) waits from 0 to 900; a later
    // writer of lock 0 gets in at 400, a later reader of lock 2 (not the
    // set's) at 500.
    let asked = vec![
        asked(
            0,
            &[want(0, Mode::Read), want(1, Mode::Write)],
            (0, 900),
            &[(0, 1), (1, 2)],
        ),
        asked(1, &[want(0, Mode::Write)], (300, 400), &[(0, 3)]),
        asked(2, &[want(2, Mode::Read)], (300, 500), &[(2, 4)]),
    ];
    let v = check(&[], &asked, &config());
    assert_eq!(v.overtaken, 1, "{v:?}");
    assert_eq!(v.figures.kinds["set"].overtaken, (1, 1));
    assert!(v.examples["overtaken"][0].contains("lock_all [0 read, 1 write]"));
}

#[test]
fn a_set_is_in_line_for_its_later_names_only_once_it_has_the_first() {
    // The same set; the later writer takes lock 1, beyond the first name
    // (lock 0), which the set lacks while a holder keeps it: not in line
    // there yet, so not overtaken. A later set of both is judged on lock 0
    // as a waiter, and as a later arrival on every name it took.
    let passed = vec![
        asked(
            0,
            &[want(0, Mode::Read), want(1, Mode::Write)],
            (0, 900),
            &[(0, 1), (1, 2)],
        ),
        asked(1, &[want(1, Mode::Write)], (300, 400), &[(1, 3)]),
    ];
    let v = check(&[], &passed, &config());
    assert_eq!(v.overtaken, 0, "{v:?}");
    // A later reader of the name the set reads first shares it.
    let shared = vec![
        passed[0].clone(),
        asked(1, &[want(0, Mode::Read)], (300, 400), &[(0, 3)]),
    ];
    let v = check(&[], &shared, &config());
    assert_eq!(v.overtaken, 0, "{v:?}");
    let later_set = vec![
        asked(0, &[want(1, Mode::Write)], (0, 900), &[(1, 1)]),
        asked(
            1,
            &[want(0, Mode::Read), want(1, Mode::Write)],
            (300, 400),
            &[(0, 2), (1, 3)],
        ),
    ];
    let v = check(&[], &later_set, &config());
    assert_eq!(v.overtaken, 1, "a later set that took lock 1 first: {v:?}");
}

#[test]
fn a_waiter_that_gave_up_is_overtaken_only_while_it_still_waited() {
    let mut asked = overtaken_writer();
    asked[1].leases.clear();
    asked[1].error = Some(ErrorKind::WaitTimeout);
    asked[1].ended = ms(3110);
    let v = check(&[], &asked, &config());
    assert_eq!(v.overtaken, 1, "{v:?}");
    // Granted within the grant slack of its deadline (arrival + 3 s).
    asked[2].ended = ms(100 + 3000 - 130);
    asked[2].arrived = ms(2900);
    assert_eq!(check(&[], &asked, &config()).overtaken, 0);
    // Gave up with node errors: it could not reach a quorum.
    asked[2].ended = ms(400);
    asked[1].node_errors = 2;
    let v = check(&[], &asked, &config());
    assert_eq!(v.overtaken, 0, "{v:?}");
    assert_eq!(v.figures.excused[NODE_ERRORS], 1);
}

/// A fault on `node` over `[from, to]` touching `workers` (`None`:
/// every worker, a node fault).
fn fault(node: usize, at: (u64, u64), workers: Option<Vec<usize>>) -> Disturbance {
    Disturbance {
        from: ms(at.0),
        to: ms(at.1),
        cause: if workers.is_some() {
            LINK_FAULT
        } else {
            NODE_FAULT
        },
        workers,
        locks: None,
        node: Some(node),
    }
}

#[test]
fn faults_excuse_a_waiter_only_once_they_took_a_quorums_worth_of_its_nodes() {
    let judge = |disturbances: Vec<Disturbance>| {
        let config = EngineConfig {
            disturbances,
            ..config()
        };
        check(&overtaken_leases(), &overtaken_writer(), &config)
    };
    // A lock over 5 nodes needs 3: with 2 faulted it keeps its places on
    // 3, and is served first there.
    let two = vec![fault(0, (350, 360), None), fault(1, (50, 150), None)];
    assert_eq!(judge(two.clone()).overtaken, 1);
    // A third node between its arrival and the overtake (one after
    // another counts: a place lost stays lost until the next attempt).
    let mut three = two.clone();
    three.push(fault(2, (390, 395), None));
    let v = judge(three);
    assert_eq!(v.overtaken, 0, "{v:?}");
    assert_eq!(v.figures.excused[NODE_FAULT], 1);
    // One that healed (with its recovery) before it arrived does not count.
    let mut before = two.clone();
    before.push(fault(2, (0, 99), None));
    assert_eq!(judge(before).overtaken, 1);
    // Faults on the waiter's own link count; on another worker's, not.
    let mut link = two.clone();
    link.push(fault(3, (50, 150), Some(vec![1])));
    let v = judge(link);
    assert_eq!(
        (v.overtaken, v.figures.excused[LINK_FAULT]),
        (0, 1),
        "{v:?}"
    );
    let mut others = two.clone();
    others.push(fault(3, (50, 150), Some(vec![2])));
    assert_eq!(judge(others).overtaken, 1);
    // An expiry on another name is no excuse.
    let other_name = Disturbance {
        from: ms(200),
        to: ms(300),
        workers: None,
        locks: Some(vec![4]),
        node: None,
        cause: EXPIRY,
    };
    assert_eq!(judge(vec![other_name]).overtaken, 1);
    // A process stall up to the overtake's grant slack.
    let config = EngineConfig {
        stalls: vec![(ms(520), ms(580))],
        ..config()
    };
    let v = check(&overtaken_leases(), &overtaken_writer(), &config);
    assert_eq!((v.overtaken, v.figures.excused[STALL]), (0, 1), "{v:?}");
}

#[test]
fn a_waiter_ahead_kept_from_its_turn_by_faults_excuses_those_behind() {
    // Worker 4 waits from 50 ms, ahead of worker 1; faults take 3 of its
    // nodes while both wait: its turn may go unclaimed, and a newcomer
    // take the lock.
    let mut asked = overtaken_writer();
    asked.push(self::asked(
        4,
        &[want(0, Mode::Write)],
        (50, 1500),
        &[(0, 9)],
    ));
    let faults = (0..3)
        .map(|node| fault(node, (300, 350), Some(vec![4])))
        .collect::<Vec<_>>();
    let config = faulted(faults.clone());
    let v = check(&[], &asked, &config);
    assert_eq!(v.overtaken, 0, "{v:?}");
    assert_eq!(v.figures.excused[AHEAD_FAULTED], 1);
    // Faults on 2 of its nodes: it kept its turn, and was overtaken too.
    let config = faulted(faults[..2].to_vec());
    assert_eq!(check(&[], &asked, &config).overtaken, 2);
    // Faulted only after the overtake; or arrived after worker 1 (behind
    // it, whose own turn came first).
    let late = faulted(
        (0..3)
            .map(|node| fault(node, (450, 500), Some(vec![4])))
            .collect(),
    );
    assert_eq!(check(&[], &asked, &late).overtaken, 2);
    asked[3].arrived = ms(240);
    let config = faulted(faults);
    assert_eq!(check(&[], &asked, &config).overtaken, 1);
    // Gave up on node errors while worker 1 waited.
    asked[3].arrived = ms(50);
    asked[3].leases.clear();
    asked[3].ended = ms(3060);
    asked[3].node_errors = 3;
    let v = check(&[], &asked, &EngineConfig::default());
    assert_eq!(v.figures.excused[AHEAD_FAULTED], 1, "{v:?}");
}

#[test]
fn faults_on_a_waiter_and_on_a_writer_ahead_of_it_count_together() {
    // As a replayed run had it: a reader (1) cut off from nodes 0 and 2,
    // behind a writer (4) whose link to node 3 is slow, keeping its place
    // there; a later reader (2) takes nodes 0, 1, 2 and 4, and the first
    // reader, refused on node 3, waits on.
    let asked = vec![
        asked(1, &[want(0, Mode::Read)], (100, 900), &[(0, 2)]),
        asked(2, &[want(0, Mode::Read)], (300, 400), &[(0, 3)]),
        asked(4, &[want(0, Mode::Write)], (50, 1500), &[(0, 9)]),
    ];
    let mut faults = vec![
        fault(0, (200, 600), Some(vec![1])),
        fault(2, (200, 600), Some(vec![1])),
        fault(3, (150, 700), Some(vec![4])),
    ];
    let config = faulted(faults.clone());
    let v = check(&[], &asked, &config);
    assert_eq!(v.overtaken, 0, "{v:?}");
    // The writer, overtaken by the later reader too, is excused alike
    // (the first reader arrived within its arrival slack).
    assert_eq!(v.figures.excused[FAULTS_WITH_AHEAD], 2, "{v:?}");
    // The writer's fault on a node the reader lost anyway: 2 nodes in
    // all, and the reader still stood first on a quorum (and so did the
    // writer: both are flagged).
    faults[2].node = Some(2);
    let config = faulted(faults.clone());
    assert_eq!(check(&[], &asked, &config).overtaken, 2);
    // A reader ahead keeps no reader out: its faults do not count (both
    // readers that waited are flagged).
    faults[2].node = Some(3);
    let mut readers = asked.clone();
    readers[2].wants = vec![want(0, Mode::Read)];
    let config = faulted(faults.clone());
    assert_eq!(check(&[], &readers, &config).overtaken, 2);
    // Nor does a writer that arrived behind the first reader.
    let mut behind = asked;
    behind[2].arrived = ms(240);
    let config = faulted(faults);
    assert_eq!(check(&[], &behind, &config).overtaken, 1);
}

#[test]
fn a_permit_tolerates_fewer_faulted_nodes_and_one_node_none() {
    let mut config = config();
    config.capacity.insert(3, 3);
    let permits = vec![
        asked(1, &[permit(3, 1)], (100, 900), &[(3, 2)]),
        asked(2, &[permit(3, 3)], (300, 400), &[(3, 3)]),
    ];
    // 3 permits over 5 nodes: a permit needs 4, so 2 faulted nodes leave
    // too few; a lock's 3 do not.
    assert_eq!(config.tolerance(&permits[0]), 2);
    assert_eq!(config.tolerance(&overtaken_writer()[1]), 3);
    let set = asked(0, &[want(0, Mode::Write), permit(3, 1)], (0, 1), &[]);
    assert_eq!(config.tolerance(&set), 2, "the fewest of its names");
    assert_eq!(check(&[], &permits, &config).overtaken, 1);
    config.disturbances = vec![fault(0, (350, 360), None), fault(4, (50, 150), None)];
    let v = check(&[], &permits, &config);
    assert_eq!(
        (v.overtaken, v.figures.excused[NODE_FAULT]),
        (0, 1),
        "{v:?}"
    );
    // One node: any fault of it.
    config.nodes = 1;
    config.disturbances = vec![fault(0, (350, 360), None)];
    assert_eq!(config.tolerance(&permits[0]), 1);
    assert_eq!(check(&[], &permits, &config).overtaken, 0);
}

fn op(lease: LeaseId, call: Call, at: (u64, u64), outcome: Outcome) -> Op {
    Op {
        worker: 0,
        lock: 0,
        lease: Some(lease),
        call,
        mode: Mode::Write,
        invoke: ms(at.0),
        complete: ms(at.1),
        bound: None,
        outcome,
        // An acquire's validity ends 500 ms after it returned; the other
        // calls say nothing of it.
        valid_until: matches!(call, Call::Lock).then(|| ms(at.1 + 500)),
        token: None,
        not_counted: NotCounted::default(),
        multi: None,
    }
}

#[test]
fn a_lease_whose_release_failed_excuses_its_name_until_after_its_expiry() {
    let failed = Outcome::Failed(ErrorKind::NoQuorum, "2 of 5".into());
    let history = vec![
        op(1, Call::Lock, (0, 10), Outcome::Ok),
        op(1, Call::Release, (100, 110), failed),
        op(2, Call::Lock, (200, 210), Outcome::Ok),
        op(2, Call::Release, (300, 310), Outcome::Ok),
        op(3, Call::Lock, (400, 410), Outcome::Ok),
        op(3, Call::Abandon, (450, 450), Outcome::Ok),
    ];
    let leases = rw_checker::leases(&history);
    let found = expiries(&history, &leases, ms(500));
    let spans: Vec<(u64, u64)> = found
        .iter()
        .map(|d| (d.from.as_millis() as u64, d.to.as_millis() as u64))
        .collect();
    // Lease 1 from its validity end (10 + 500) to 500 ms after; lease 3,
    // dropped, likewise; lease 2 released.
    assert_eq!(spans, [(510, 1010), (910, 1410)]);
    assert!(found
        .iter()
        .all(|d| d.locks == Some(vec![0]) && d.cause == EXPIRY));
    // It excuses a waiter of that name overtaken once lease 1 may have
    // expired (at 600), not while it still held a quorum (at 400).
    let config = EngineConfig {
        disturbances: found,
        ..config()
    };
    let v = check(&[], &overtaken_writer(), &config);
    assert_eq!(v.overtaken, 1, "{v:?}");
    let mut later = overtaken_writer();
    later[2].ended = ms(600);
    let v = check(&[], &later, &config);
    assert_eq!((v.overtaken, v.figures.excused[EXPIRY]), (0, 1), "{v:?}");
}

#[test]
fn a_waiter_kept_out_by_later_arrivals_beyond_the_bound_is_starved() {
    // A writer arrives at 100 behind a holder that lets go at 200; later
    // writers hold the lock back to back from 250 to 2900; it gives up.
    let mut asked = vec![asked(0, &[want(0, Mode::Write)], (0, 5), &[(0, 1)])];
    asked.push(self::asked(1, &[want(0, Mode::Write)], (100, 3110), &[]));
    let mut leases = vec![lease(1, 0, Mode::Write, (5, 200))];
    for (i, start) in (250..2900).step_by(250).enumerate() {
        let id = 10 + i as LeaseId;
        asked.push(self::asked(
            2,
            &[want(0, Mode::Write)],
            (start - 10, start),
            &[(0, id)],
        ));
        leases.push(lease(id, 0, Mode::Write, (start, start + 240)));
    }
    let v = check(&leases, &asked, &config());
    assert_eq!(v.starved, 1, "{v:?}");
    assert_eq!(v.figures.kinds["write"].starved, 1);
    assert_eq!(v.figures.max_kept_out, ms(3110 - 200));
    assert!(v.examples["starved"][0].contains("after the earlier holders let go at 200.0ms"));
    // The same wait behind readers, as a reader: readers do not keep it out.
    let mut reader = asked.clone();
    reader[1].wants = vec![want(0, Mode::Read)];
    for a in reader.iter_mut().skip(2) {
        a.wants = vec![want(0, Mode::Read)];
    }
    let read_leases: Vec<RwLease> = leases
        .iter()
        .map(|l| RwLease {
            mode: if l.lease == 1 {
                Mode::Write
            } else {
                Mode::Read
            },
            ..l.clone()
        })
        .collect();
    let v = check(&read_leases, &reader, &config());
    assert_eq!(v.starved, 0, "{v:?}");
    // Faults on its links to 3 of the 5 nodes for most of the wait: not
    // starved. On 2 of them it kept a quorum: still starved.
    let links = |n: usize| {
        (0..n)
            .map(|node| fault(node, (1000, 2500), Some(vec![1])))
            .collect()
    };
    let mut config = EngineConfig {
        disturbances: links(3),
        ..config()
    };
    let v = check(&leases, &asked, &config);
    assert_eq!(
        (v.starved, v.figures.max_kept_out),
        (0, ms(2910 - 1500)),
        "{v:?}"
    );
    config.disturbances = links(2);
    assert_eq!(check(&leases, &asked, &config).starved, 1);
}

#[test]
fn capacity_is_judged_per_name_with_weights() {
    let mut config = config();
    config.capacity.insert(3, 3);
    let asked = vec![
        asked(0, &[permit(3, 2)], (0, 10), &[(3, 1)]),
        asked(1, &[permit(3, 1)], (0, 20), &[(3, 2)]),
        asked(2, &[permit(3, 2)], (0, 30), &[(3, 3)]),
    ];
    let mut leases = vec![
        lease(1, 3, Mode::Permit, (10, 100)),
        lease(2, 3, Mode::Permit, (20, 100)),
        // Weight 2 beside weights 2 and 1 of 3: over capacity.
        lease(3, 3, Mode::Permit, (30, 40)),
        // Readers together, then a writer that waited for them, then
        // one beside a reader.
        lease(4, 0, Mode::Read, (10, 50)),
        lease(5, 0, Mode::Read, (20, 50)),
        lease(6, 0, Mode::Write, (50, 60)),
        lease(7, 0, Mode::Read, (55, 70)),
    ];
    let v = check(&leases, &asked, &config);
    assert_eq!(v.over_capacity, 2, "{v:?}");
    assert_eq!(v.figures.peak[&3], 5);
    assert_eq!(v.figures.peak[&0], 2);
    let examples = &v.examples["over_capacity"];
    assert!(examples[0].starts_with("lock 0: read lease 7 (worker 7, token None) held [55.0ms, 70.0ms] while 1 other(s) held: write lease 6"), "{examples:?}");
    assert!(examples[1].starts_with("lock 3 (N = 3): permit lease 3 (worker 3, token None) held [30.0ms, 40.0ms], weight 2, while 2"), "{examples:?}");
    // Weights 2 + 1 fit.
    leases[2].release_began = Some(ms(30));
    leases.truncate(6);
    let v = check(&leases, &asked, &config);
    assert_eq!((v.total(), v.figures.peak[&3]), (0, 3), "{v:?}");
}

#[test]
fn judge_reads_the_leases_from_the_history_and_excuses_expiries() {
    // Lease 1's release failed: its lock may be free once it expires at
    // 510, and whoever looks first takes it then.
    let failed = Outcome::Failed(ErrorKind::NoQuorum, "2 of 5".into());
    let history = vec![
        op(1, Call::Lock, (0, 10), Outcome::Ok),
        op(1, Call::Release, (100, 110), failed),
        op(3, Call::Lock, (590, 600), Outcome::Ok),
        op(3, Call::Release, (700, 710), Outcome::Ok),
        op(2, Call::Lock, (200, 800), Outcome::Ok),
        op(2, Call::Release, (900, 910), Outcome::Ok),
    ];
    let asked = vec![
        asked(0, &[want(0, Mode::Write)], (0, 10), &[(0, 1)]),
        asked(1, &[want(0, Mode::Write)], (200, 800), &[(0, 2)]),
        asked(2, &[want(0, Mode::Write)], (590, 600), &[(0, 3)]),
    ];
    let run = EngineRun {
        asked,
        recover: ms(500),
        starvation_bound: ms(2000),
        ..EngineRun::default()
    };
    let v = judge(&history, &run, &[]);
    assert_eq!((v.overtaken, v.figures.excused[EXPIRY]), (0, 1), "{v:?}");
    // Released: the same order is overtaken.
    let mut released = history.clone();
    released[1].outcome = Outcome::Ok;
    let v = judge(&released, &run, &[]);
    assert_eq!(v.overtaken, 1, "{v:?}");
}

/// The shape of `control-engine-queue-jump`: a holder's release that
/// forgets the queue, and a later writer in before the waiting one.
#[test]
fn the_queue_jump_controls_shape_is_flagged_overtaken_and_nothing_else() {
    let asked = vec![
        asked(0, &[want(0, Mode::Write)], (0, 5), &[(0, 1)]),
        asked(1, &[want(0, Mode::Write)], (10, 1300), &[(0, 2)]),
        asked(2, &[want(0, Mode::Write)], (410, 413), &[(0, 3)]),
    ];
    let leases = vec![
        lease(1, 0, Mode::Write, (5, 405)),
        lease(2, 0, Mode::Write, (1300, 1310)),
        lease(3, 0, Mode::Write, (413, 913)),
    ];
    let v = check(&leases, &asked, &config());
    assert_eq!((v.overtaken, v.total()), (1, 1), "{v:?}");
}
