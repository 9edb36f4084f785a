use super::*;
use crate::examples::EXAMPLES;
use crate::history::{Call, NotCounted, Op, Outcome};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A permit of lock 0 by worker `id`: its acquire began 2 ms before it
/// returned; valid 10 s after that; released from `release`.
fn permit(id: LeaseId, returned: u64, release: u64, token: u64) -> RwLease {
    RwLease {
        lock: 0,
        mode: Mode::Permit,
        lease: id,
        worker: id as usize,
        invoked: ms(returned - 2),
        returned: ms(returned),
        valid_until: ms(returned + 10_000),
        extended_until: None,
        release_began: Some(ms(release)),
        token: Some(token),
    }
}

fn n(permits: u32) -> SemConfig {
    SemConfig::new(permits)
}

/// Three holders of three permits at once, a fourth as soon as one
/// begins its release, a fifth after the others, on lock 0; the same
/// on lock 1, where they do not meet lock 0's.
fn clean() -> Vec<RwLease> {
    let mut permits = vec![
        permit(1, 10, 100, 10),
        permit(2, 20, 150, 20),
        permit(3, 30, 200, 30),
        permit(4, 100, 250, 40), // touches permit 1's release
        permit(5, 300, 400, 50),
    ];
    let other: Vec<RwLease> = permits
        .iter()
        .map(|p| RwLease {
            lock: 1,
            lease: p.lease + 10,
            ..p.clone()
        })
        .collect();
    permits.extend(other);
    permits
}

#[test]
fn a_clean_history_passes_and_fills_the_names() {
    let v = check(&clean(), &n(3));
    assert_eq!(v.total(), 0, "{v:?}");
    assert_eq!(v.peak, BTreeMap::from([(0, 3), (1, 3)]));
}

#[test]
fn more_holders_than_permits_are_flagged() {
    // A fourth holder inside the three's holds.
    let mut permits = clean();
    permits.push(permit(6, 50, 60, 35));
    let v = check(&permits, &n(3));
    assert_eq!((v.over_permits, v.total()), (1, 1), "{v:?}");
    let example = &v.examples["over_permits"][0];
    assert!(
        example.contains("permit lease 6") && example.contains("3 other permit(s)"),
        "{example}"
    );
    assert_eq!(v.peak[&0], 4);
    // With two permits, the third of the first three is one too many,
    // and so is permit 4 (with 2 and 3).
    let v = check(&clean(), &n(2));
    assert_eq!(v.over_permits, 4, "{v:?}");
}

#[test]
fn the_controls_three_holders_of_two_permits_are_flagged() {
    // Each taken while another node was down, all valid at once.
    let permits = [
        permit(1, 100, 3000, 1),
        permit(2, 600, 3000, 2),
        permit(3, 1100, 3000, 3),
    ];
    let v = check(&permits, &n(2));
    assert_eq!((v.over_permits, v.total()), (1, 1), "{v:?}");
    assert!(v.examples["over_permits"][0].starts_with("lock 0: permit lease 3"));
    // Three permits admit them.
    assert_eq!(check(&permits, &n(3)).total(), 0);
}

#[test]
fn touching_intervals_do_not_hold_together() {
    // One permit: the second holder returned exactly when the first
    // began its release; a millisecond earlier, both held.
    let over = |returned| {
        let permits = [permit(1, 10, 100, 1), permit(2, returned, 200, 2)];
        check(&permits, &n(1)).over_permits
    };
    assert_eq!((over(100), over(99)), (0, 1));
}

#[test]
fn expiry_and_extends_end_the_interval() {
    // Permit 1 never released: its validity [10, 60] ends it.
    let mut p = permit(1, 10, 0, 1);
    p.release_began = None;
    p.valid_until = ms(60);
    let q = permit(2, 80, 200, 2);
    assert_eq!(check(&[p.clone(), q.clone()], &n(1)).over_permits, 0);
    // Renewed (kept alive) to 150: permit 2 at 80 holds with it.
    p.extended_until = Some(ms(150));
    assert_eq!(check(&[p, q], &n(1)).over_permits, 1);
}

#[test]
fn empty_intervals_hold_nothing() {
    // Released at once, and returned expired: neither counts as a holder.
    let mut at_once = permit(2, 50, 50, 2);
    at_once.invoked = ms(40);
    let mut expired = permit(3, 60, 70, 3);
    expired.valid_until = ms(55);
    let permits = [permit(1, 10, 100, 1), at_once, expired];
    let v = check(&permits, &n(1));
    assert_eq!((v.over_permits, v.expired_lease_returned), (0, 1), "{v:?}");
    assert_eq!(v.peak[&0], 1);
}

#[test]
fn many_overlaps_keep_a_few_examples() {
    let permits: Vec<RwLease> = (1..=12).map(|i| permit(i, 10 + i, 1000, i)).collect();
    let v = check(&permits, &n(2));
    assert_eq!(v.over_permits, 10, "{v:?}");
    assert_eq!(v.examples["over_permits"].len(), EXAMPLES);
}

#[test]
fn tokens_must_go_up_after_a_permit_was_returned() {
    // Permit 2's acquire began after permit 1 came back: a lower or equal
    // token is a violation.
    for second in [5, 4] {
        let permits = [permit(1, 10, 20, 5), permit(2, 30, 40, second)];
        let v = check(&permits, &n(3));
        assert_eq!((v.fencing, v.total()), (1, 1), "{v:?}");
        let example = &v.examples["fencing"][0];
        assert!(
            example.contains("permit lease 2") && example.contains("token 5 of permit lease 1"),
            "{example}"
        );
    }
    // A higher one is fine.
    let permits = [permit(1, 10, 20, 5), permit(2, 30, 40, 6)];
    assert_eq!(check(&permits, &n(3)).total(), 0);
}

#[test]
fn permits_acquired_at_the_same_time_may_come_back_in_any_order() {
    // Permit 2's acquire [9, 30] began before permit 1 came back at 10:
    // its lower (even equal) token is no violation; permit 3, begun after
    // both, must be above both.
    let mut concurrent = permit(2, 30, 40, 5);
    concurrent.invoked = ms(9);
    let permits = [
        permit(1, 10, 20, 5),
        concurrent.clone(),
        permit(3, 50, 60, 6),
    ];
    assert_eq!(check(&permits, &n(3)).total(), 0);
    concurrent.token = Some(3);
    let permits = [permit(1, 10, 20, 5), concurrent, permit(3, 50, 60, 4)];
    let v = check(&permits, &n(3));
    assert_eq!(v.fencing, 1, "{v:?}");
    assert!(v.examples["fencing"][0].contains("permit lease 3"));
    // The permit returned exactly as another began is not before it.
    let mut same = permit(2, 30, 40, 1);
    same.invoked = ms(10);
    assert_eq!(check(&[permit(1, 10, 20, 5), same], &n(3)).fencing, 0);
}

#[test]
fn tokens_are_judged_per_name_and_only_where_drawn() {
    let mut other = permit(2, 30, 40, 1);
    other.lock = 1;
    let mut unfenced = permit(3, 50, 60, 0);
    unfenced.token = None;
    let permits = [permit(1, 10, 20, 5), other, unfenced];
    assert_eq!(check(&permits, &n(3)).total(), 0);
}

#[test]
fn a_permit_returned_expired_is_flagged_unless_the_process_stalled() {
    let mut p = permit(1, 510, 520, 1);
    p.valid_until = ms(505);
    p.invoked = ms(500);
    let v = check(std::slice::from_ref(&p), &n(3));
    assert_eq!(v.expired_lease_returned, 1, "{v:?}");
    assert!(v.examples["expired_lease_returned"][0].contains("permit lease 1"));
    (p.invoked, p.returned) = (ms(500), ms(507));
    assert_eq!(check(std::slice::from_ref(&p), &n(3)).total(), 0);
    p.returned = ms(600);
    let stalled = SemConfig {
        stalls: vec![(ms(504), ms(599))],
        ..n(3)
    };
    assert_eq!(check(&[p], &stalled).total(), 0);
}

/// A recorded call by worker `lease` on lock 0 under `lease`.
fn op(lease: LeaseId, call: Call, mode: Mode, at: (u64, u64)) -> Op {
    Op {
        worker: lease as usize,
        lock: 0,
        lease: Some(lease),
        call,
        mode,
        invoke: ms(at.0),
        complete: ms(at.1),
        bound: None,
        outcome: Outcome::Ok,
        valid_until: None,
        token: None,
        not_counted: NotCounted::default(),
        multi: None,
    }
}

fn granted(lease: LeaseId, mode: Mode, at: (u64, u64), valid: u64, token: u64) -> Op {
    let mut o = op(lease, Call::Lock, mode, at);
    o.valid_until = Some(ms(valid));
    o.token = Some(token);
    o
}

#[test]
fn judge_reads_the_permits_of_a_history() {
    let semaphores = Semaphores {
        permits: 2,
        flagged_by: None,
    };
    // Permit 1 kept alive: taken valid until 500, released at 900 when
    // its renewals had moved validity to 1300. Permit 2 [100, 950].
    // Permit 3 at 700 is the third holder; so is, at 800, an exclusive
    // lease, which is not the semaphore's.
    let mut release = op(1, Call::Release, Mode::Permit, (900, 902));
    release.valid_until = Some(ms(1300));
    let history = vec![
        granted(1, Mode::Permit, (8, 10), 500, 3),
        granted(2, Mode::Permit, (98, 100), 600, 4),
        op(2, Call::Release, Mode::Permit, (950, 951)),
        granted(4, Mode::Write, (798, 800), 1300, 1),
        op(4, Call::Release, Mode::Write, (850, 851)),
        release,
    ];
    let v = judge(&history, &semaphores, &[]);
    assert_eq!(v.total(), 0, "{v:?}");
    // Permit 2 was valid only until 600 (its release carries no later
    // word here): permit 3 at 700 is the second holder.
    let mut history = history;
    history.push(granted(3, Mode::Permit, (698, 700), 1200, 5));
    let v = judge(&history, &semaphores, &[]);
    assert_eq!((v.over_permits, v.total()), (0, 0), "{v:?}");
    // Permit 2 renewed to 1000 too: three holders at 700.
    history[2].valid_until = Some(ms(1000));
    let v = judge(&history, &semaphores, &[]);
    assert_eq!((v.over_permits, v.total()), (1, 1), "{v:?}");
    assert!(v.examples["over_permits"][0].contains("permit lease 3"));
}

#[test]
fn the_exclusive_checker_leaves_permits_to_this_one() {
    use crate::checker::{self, Config, FinalState};
    // Two permits together, with the same token (concurrent acquires):
    // an overlap and a token that did not increase to the exclusive
    // checker, nothing here.
    let history = vec![
        granted(1, Mode::Permit, (8, 10), 500, 3),
        op(1, Call::Release, Mode::Permit, (100, 101)),
        granted(2, Mode::Permit, (9, 20), 510, 3),
        op(2, Call::Release, Mode::Permit, (110, 111)),
    ];
    let state = FinalState::default();
    let exclusive = checker::check(&history, &state, &Config::default());
    assert_eq!(
        (exclusive.overlap, exclusive.fencing),
        (1, 1),
        "{exclusive:?}"
    );
    let semaphore = Config {
        semaphore: true,
        ..Config::default()
    };
    assert_eq!(checker::check(&history, &state, &semaphore).total(), 0);
    let semaphores = Semaphores {
        permits: 2,
        flagged_by: None,
    };
    assert_eq!(judge(&history, &semaphores, &[]).total(), 0);
}
