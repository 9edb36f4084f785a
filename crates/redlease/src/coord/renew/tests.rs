//! The renewer's decisions, with injected time.

use super::*;
use crate::core::lease_state::LateGrants;
use crate::core::quorum::quorum;
use crate::core::token::LockerTag;
use crate::core::validity::DriftModel;

const MS: Duration = Duration::from_millis(1);

/// A kept-alive lease on `nodes` that `granted` gave at `t0`, with its
/// first renewal round queued.
fn entry(nodes: usize, granted: &[usize], t0: Instant) -> Entry {
    let timing = Timing::new("ttl", 1_500 * MS, DriftModel::DEFAULT, Some(400 * MS)).unwrap();
    let until = timing.valid_until(t0);
    let view = LeaseState::new(until, timing.drift);
    Entry {
        key: "k".into(),
        others: None,
        token: Token::generate(&LockerTag::generate()),
        hold: Hold::Exclusive,
        timing,
        interval: timing.renew_interval(1.0 / 3.0),
        bounds: ExpiryBounds::new(nodes, quorum(nodes), granted.iter().copied(), until),
        late: None,
        round: 1,
        extend_waiting: false,
        errors: Vec::new(),
        queued: true,
        due: t0 + 500 * MS,
        view,
        state: watch::Sender::new(view),
    }
}

fn confirm(e: &mut Entry, i: usize, sent: Instant) {
    let (ttl, drift) = (e.timing.ttl, e.timing.drift);
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
    assert_eq!(e.view.valid_until, sent + e.timing.ttl - e.timing.drift);
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
    let mut c = entry(1, &[0], t0);
    c.hold = Hold::Shared;
    let calls = lanes::calls_of(&[&a, &b, &c], false, false);
    let lens: Vec<usize> = calls.iter().map(ExtendMany::len).collect();
    assert_eq!(lens, [2, 1]);
    let calls = lanes::calls_of(&[&c, &c], false, false);
    assert_eq!(calls.len(), 1);
}
