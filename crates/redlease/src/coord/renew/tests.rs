//! The renewer's decisions, with injected time.

use super::*;
use crate::core::lease_state::LateGrants;
use crate::core::mode::Hold;
use crate::core::quorum::quorum;
use crate::core::token::LockerTag;
use crate::core::validity::DriftModel;

const MS: Duration = Duration::from_millis(1);

/// A kept-alive lease on `nodes` that `granted` gave at `t0`, with its
/// first renewal round queued.
fn entry(nodes: usize, granted: &[usize], t0: Instant) -> Entry {
    entry_holding(nodes, granted, t0, Hold::Exclusive)
}

fn entry_holding(nodes: usize, granted: &[usize], t0: Instant, hold: Hold) -> Entry {
    let timing = Timing::new("ttl", 1_500 * MS, DriftModel::DEFAULT, Some(400 * MS)).unwrap();
    let until = timing.valid_until(t0);
    let view = LeaseState::new(until, timing.drift);
    let claim =
        crate::core::claim::Claim::one(crate::core::keys::LockKeys::new("p:", "k", 1), hold);
    let owner = Arc::new(Ownership::new(
        claim,
        nodes,
        &LockerTag::generate(),
        None,
        timing.lock_delay,
        timing.node_timeout,
    ));
    owner.state.modify(|s| *s = view);
    Entry {
        owner,
        cadence: Cadence::new(&timing, 1.0 / 3.0),
        bounds: ExpiryBounds::new(nodes, quorum(nodes), granted.iter().copied(), until),
        late: None,
        round: 1,
        extend_waiting: false,
        errors: None,
        queued: true,
        due: t0 + 500 * MS,
        look_at: 0,
        near_at: 0,
        lanes: 0,
        view,
    }
}

fn confirm(e: &mut Entry, i: usize, sent: Instant) {
    let (ttl, drift) = (e.cadence.ttl, e.cadence.drift);
    e.bounds.confirmed(i, sent, ttl, drift, e.round);
}

/// Issue 30: one node's refusal came before the renewal of the node
/// whose yes to the acquire came late, and the lease was reported
/// lost as `Refused` while two of three nodes held it.
#[test]
fn one_refusal_before_the_quorum_confirms_does_not_lose_the_lease() {
    let t0 = Instant::now();
    let mut e = entry(3, &[0, 1], t0);
    let acquired = e.view.valid_until;
    let sent = t0 + 500 * MS;
    e.bounds.refused(0);
    assert!(e.evaluate(sent + MS), "lost: {:?}", e.view.lost);
    assert_eq!(e.view.valid_until, acquired, "nothing taken back");
    confirm(&mut e, 1, sent);
    assert!(e.evaluate(sent + 2 * MS));
    assert_eq!(e.view.confirmed_round, 0, "one of three");
    confirm(&mut e, 2, sent);
    assert!(e.evaluate(sent + 200 * MS));
    assert_eq!(e.view.confirmed_round, 1, "renewed by nodes 1 and 2");
    assert_eq!(e.view.valid_until, sent + e.cadence.ttl - e.cadence.drift);
    assert_eq!(e.view.lost, None);
}

#[test]
fn refusals_that_leave_no_quorum_lose_it_at_once() {
    let t0 = Instant::now();
    let mut e = entry(3, &[0, 1, 2], t0);
    e.bounds.refused(0);
    assert!(e.evaluate(t0 + 500 * MS));
    e.bounds.refused(2);
    assert!(!e.evaluate(t0 + 501 * MS));
    assert_eq!(e.view.lost, Some(LostReason::Refused));
}

#[test]
fn one_refusal_and_silence_run_the_lease_out() {
    let t0 = Instant::now();
    let mut e = entry(3, &[0, 1], t0);
    e.bounds.refused(0);
    assert!(e.evaluate(t0 + 500 * MS));
    let end = e.view.lost_from();
    assert!(e.evaluate(end - MS));
    assert!(!e.evaluate(end));
    assert_eq!(e.view.lost, Some(LostReason::Expired));
}

#[test]
fn a_late_yes_to_the_acquire_counts_for_the_quorum() {
    let t0 = Instant::now();
    let mut e = entry(3, &[0, 1], t0);
    let acquired = e.view.valid_until;
    let late = LateGrants::new(acquired);
    let recorder = late.recorder();
    e.late = Some(late);
    recorder.granted(2);
    drop(recorder);
    e.bounds.refused(0);
    assert!(e.evaluate(t0 + 500 * MS));
    assert!(e.late.is_none(), "every request answered");
    // Nodes 1 and 2 are known to hold it: one confirmation more renews.
    assert_eq!(e.bounds.valid_until(), Some(acquired));
    confirm(&mut e, 1, t0 + 500 * MS);
    assert!(!e.bounds.confirmed_by_quorum(1));
    confirm(&mut e, 2, t0 + 500 * MS);
    assert!(e.evaluate(t0 + 700 * MS));
    assert_eq!(e.view.confirmed_round, 1);
}

#[test]
fn read_holds_go_in_calls_of_their_own() {
    let t0 = Instant::now();
    let (a, b) = (entry(1, &[0], t0), entry(1, &[0], t0));
    let c = entry_holding(1, &[0], t0, Hold::Shared);
    let calls = lanes::calls_of(&[&a, &b, &c], false, false);
    let lens: Vec<usize> = calls.iter().map(ExtendMany::len).collect();
    assert_eq!(lens, [2, 1]);
    let calls = lanes::calls_of(&[&c, &c], false, false);
    assert_eq!(calls.len(), 1);
}

/// The id of the `n`th lease put in a fresh table: slot `n`, first
/// generation.
fn fresh(n: u64) -> u64 {
    1 << 32 | n
}

/// Leases in a table, each planned on the agenda; the first is due at
/// `t0 + 500 ms`, each next one 100 ms later.
fn planned(count: u64, t0: Instant) -> (Slab, Agenda) {
    let mut agenda = Agenda::new(3);
    let mut leases = Slab::default();
    for n in 0..count {
        let mut e = entry(3, &[0, 1, 2], t0);
        e.queued = false;
        e.due = t0 + 500 * MS + 100 * MS * n as u32;
        // Not lost before the tests look.
        e.view.valid_until = t0 + 10_000 * MS;
        let id = leases.insert(e).get();
        assert_eq!(id, fresh(n), "a fresh table numbers its leases in order");
        agenda.plan(id, leases.get_mut(&id).unwrap());
    }
    (leases, agenda)
}

/// The agenda's moment for `at`: at it, or up to a millisecond later.
fn assert_at(moment: Option<Instant>, at: Instant) {
    let moment = moment.expect("a look planned");
    assert!(moment >= at && moment <= at + MS, "{moment:?} for {at:?}");
}

#[test]
fn the_agenda_gives_only_the_leases_whose_moment_came() {
    let t0 = Instant::now();
    let (mut leases, mut agenda) = planned(5, t0);
    assert_at(agenda.next_look(&leases), t0 + 500 * MS);
    assert_eq!(agenda.pop_look(t0 + 499 * MS, &mut leases), None);
    assert_eq!(agenda.pop_look(t0 + 650 * MS, &mut leases), Some(fresh(0)));
    assert_eq!(agenda.pop_look(t0 + 650 * MS, &mut leases), Some(fresh(1)));
    assert_eq!(agenda.pop_look(t0 + 650 * MS, &mut leases), None);
    // Half an interval (250 ms) before they are due, leases may join.
    let near: Vec<u64> =
        std::iter::from_fn(|| agenda.pop_near(t0 + 640 * MS, &mut leases)).collect();
    assert_eq!(near, [0, 1, 2, 3].map(fresh));
    assert_at(agenda.next_look(&leases), t0 + 700 * MS);
}

#[test]
fn a_replanned_lease_is_looked_at_once_at_its_new_moment() {
    let t0 = Instant::now();
    let (mut leases, mut agenda) = planned(2, t0);
    // Lease 0 renewed meanwhile: due a second later.
    let e = leases.get_mut(&fresh(0)).unwrap();
    e.due += 1_000 * MS;
    agenda.plan(fresh(0), e);
    assert_at(agenda.next_look(&leases), t0 + 600 * MS);
    assert_eq!(
        agenda.pop_look(t0 + 1_499 * MS, &mut leases),
        Some(fresh(1))
    );
    assert_eq!(
        agenda.pop_look(t0 + 1_499 * MS, &mut leases),
        None,
        "the old moment is stale"
    );
    assert_eq!(
        agenda.pop_look(t0 + 1_501 * MS, &mut leases),
        Some(fresh(0))
    );
    // A lease gone from the table is skipped.
    leases.remove(&fresh(1));
    let e = leases.get_mut(&fresh(0)).unwrap();
    agenda.plan(fresh(0), e);
    assert_eq!(
        agenda.pop_look(t0 + 9_000 * MS, &mut leases),
        Some(fresh(0))
    );
    assert_eq!(agenda.next_look(&leases), None);
}

#[test]
fn lanes_take_each_queued_lease_once_most_urgent_first() {
    let t0 = Instant::now();
    let (mut leases, mut agenda) = planned(3, t0);
    // Lease 2 ends first, lease 1 last.
    leases.get_mut(&fresh(2)).unwrap().view.valid_until = t0 + 900 * MS;
    leases.get_mut(&fresh(1)).unwrap().view.valid_until = t0 + 11_000 * MS;
    for id in [0, 1, 2, 0].map(fresh) {
        agenda.enqueue(id, leases.get_mut(&id).unwrap());
    }
    let lane0: Vec<u64> = std::iter::from_fn(|| agenda.pop_lane(0, &mut leases)).collect();
    assert_eq!(lane0, [2, 0, 1].map(fresh), "queued twice, taken once");
    // Lane 1 still has them; a lease released meanwhile is skipped.
    leases.remove(&fresh(0));
    let lane1: Vec<u64> = std::iter::from_fn(|| agenda.pop_lane(1, &mut leases)).collect();
    assert_eq!(lane1, [2, 1].map(fresh));
    // Taken off lane 0, lease 1 can be queued there again.
    agenda.enqueue(fresh(1), leases.get_mut(&fresh(1)).unwrap());
    assert_eq!(agenda.pop_lane(0, &mut leases), Some(fresh(1)));
    assert_eq!(agenda.pop_lane(2, &mut leases), Some(fresh(2)));
}
