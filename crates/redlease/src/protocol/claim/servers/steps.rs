//! The engine's other steps on a real server: a downgrade, a release
//! that puts its Locker's next waiter in line, a failed attempt's cleanup
//! that keeps its turn, leaving, renewal, inspection, and the
//! least-privilege user running every step.

use std::time::Duration;

use super::*;

/// A downgrade turns the hold alone into a read hold at once: the
/// readers first in line join, and no writer gets in between.
#[test]
fn a_downgrade_lets_the_readers_in_line_join() {
    let mut f = fixture();
    f.listen(2);
    f.listen(3);
    let (w, r, w2) = (token(1, 1), token(2, 2), token(3, 3));
    assert!(taken(&f.acquire(Hold::Exclusive, &w, None)));
    assert!(!taken(&f.acquire(
        Hold::Shared,
        &r,
        Some((&place(2, 1), 100))
    )));
    assert!(!taken(&f.acquire(
        Hold::Exclusive,
        &w2,
        Some((&place(3, 1), 200))
    )));
    let done: PerName = ClaimDowngrade {
        keys: &[KEY],
        token: &w,
        bound: false,
        pubsub: PubSub::Classic,
    }
    .call()
    .query(&mut f.conn)
    .unwrap();
    assert!(done.all());
    assert_eq!(f.get(KEY).as_deref(), Some("readers"));
    assert_eq!(f.woken(2), ["1"]);
    assert_eq!(f.woken(3), Vec::<String>::new());
    assert!(taken(&f.acquire(
        Hold::Shared,
        &r,
        Some((&place(2, 1), 100))
    )));
    assert_eq!(f.inspect().members, 2);
    // The downgraded hold is a read hold now: released as one.
    assert!(f.release(Hold::Shared, &w));
    assert!(f.release(Hold::Shared, &r));
    assert_eq!(f.woken(3), ["1"]);
}

/// A waiter that stood first and did not fit leaves (it gave up): those
/// behind it that fit are served at once, not at their next look.
#[test]
fn leaving_the_front_lets_those_behind_in_at_once() {
    let mut f = fixture();
    f.listen(2);
    f.listen(3);
    let (r1, w, r2) = (token(1, 1), token(2, 2), token(3, 3));
    assert!(taken(&f.acquire(Hold::Shared, &r1, None)));
    // A writer waits for the reader; a later reader waits behind it.
    assert!(!taken(&f.acquire(
        Hold::Exclusive,
        &w,
        Some((&place(2, 1), 100))
    )));
    assert!(!taken(&f.acquire(
        Hold::Shared,
        &r2,
        Some((&place(3, 1), 200))
    )));
    assert_eq!(f.woken(3), Vec::<String>::new());
    let _: i64 = ClaimLeave {
        keys: &[KEY],
        holds: &[Hold::Exclusive],
        place: &place(2, 1),
        pubsub: PubSub::Classic,
    }
    .call()
    .query(&mut f.conn)
    .unwrap();
    assert_eq!(f.woken(3), ["1"], "the reader behind is served");
    assert!(f.queue().is_empty());
    assert!(taken(&f.acquire(
        Hold::Shared,
        &r2,
        Some((&place(3, 1), 200))
    )));
}

/// A release hands the name to its Locker's next waiter, which waits in
/// the process, ahead of a later arrival in line; a failed attempt's
/// cleanup keeps its waiter's turn; leaving hands a reservation on.
#[test]
fn the_next_waiter_of_the_releasing_locker_keeps_its_turn() {
    let mut f = fixture();
    f.listen(1);
    f.listen(2);
    let (holder, later) = (token(1, 1), token(2, 2));
    assert!(taken(&f.acquire(Hold::Exclusive, &holder, None)));
    assert!(!taken(&f.acquire(
        Hold::Exclusive,
        &later,
        Some((&place(2, 1), 300))
    )));
    // Tag 1's next waiter arrived at 200, before the other at 300.
    let next = place(1, 7);
    let released = f.release_on(
        &[KEY],
        &[Hold::Exclusive],
        &holder,
        Some((&next, 200, false)),
    );
    assert!(released.all());
    assert_eq!(f.woken(1), ["7"]);
    assert_eq!(f.woken(2), Vec::<String>::new());
    assert_eq!(f.get(KEY), Some(format!("{next}:w~")));
    // It gives up: the name goes to the one after it.
    let _: i64 = ClaimLeave {
        keys: &[KEY],
        holds: &[Hold::Exclusive],
        place: &next,
        pubsub: PubSub::Classic,
    }
    .call()
    .query(&mut f.conn)
    .unwrap();
    assert_eq!(f.woken(2), ["1"]);
    assert!(taken(&f.acquire(
        Hold::Exclusive,
        &later,
        Some((&place(2, 1), 300))
    )));
    // With nobody else in line the Locker's next waiter is not put there:
    // the process hands the name on itself.
    assert!(f
        .release_on(
            &[KEY],
            &[Hold::Exclusive],
            &later,
            Some((&next, 400, false))
        )
        .all());
    assert_eq!(f.get(KEY), None);
    assert!(f.queue().is_empty());
    // A waiter's failed attempt gives back what it took, keeping its turn.
    let mine = place(2, 3);
    assert!(taken(&f.acquire(
        Hold::Exclusive,
        &later,
        Some((&mine, 500))
    )));
    assert!(f
        .release_on(&[KEY], &[Hold::Exclusive], &later, Some((&mine, 500, true)))
        .all());
    assert_eq!(f.get(KEY), Some(format!("{mine}:w~")));
    assert_eq!(f.woken(2), Vec::<String>::new(), "its own turn, no wake-up");
}

/// Renewal renews every hold of a lease that is still ours, a weighted
/// permit's every member, and says which leases were not.
#[test]
fn renewal_renews_every_hold_still_ours() {
    let mut f = fixture();
    let (w, r, p) = (token(1, 1), token(1, 2), token(1, 3));
    let (kw, kr, kp) = ("t:{w}", "t:{r}", "t:{p}");
    assert!(taken(&f.acquire_on(&[kw], &[Hold::Exclusive], &w, None)));
    assert!(taken(&f.acquire_on(&[kr], &[Hold::Shared], &r, None)));
    assert!(taken(&f.acquire_on(&[kp], &[permits(5, 2)], &p, None)));
    let gone = token(1, 4);
    let long = Duration::from_secs(100);
    let renew = |f: &mut Fixture, hold: Hold, holds: &[(&str, &str)]| -> Vec<bool> {
        let (cmd, n) = ClaimRenew {
            holds: holds.iter().map(|&(k, t)| (k, t, long)),
            hold,
            bound: false,
        }
        .call();
        assert_eq!(n, holds.len());
        let renewed: PerName = cmd.query(&mut f.conn).unwrap();
        renewed.0
    };
    assert_eq!(
        renew(&mut f, Hold::Exclusive, &[(kw, &w), (kw, &gone)]),
        [true, false]
    );
    assert_eq!(
        renew(&mut f, Hold::Shared, &[(kr, &r), (kr, &gone)]),
        [true, false]
    );
    assert_eq!(renew(&mut f, permits(5, 2), &[(kp, &p)]), [true]);
    let pttl =
        |f: &mut Fixture, key: &str| -> i64 { run(&mut f.conn, command("PTTL").arg(key).clone()) };
    assert!(pttl(&mut f, kw) > 50_000 && pttl(&mut f, kr) > 50_000 && pttl(&mut f, kp) > 50_000);
    let scores: Vec<(String, f64)> = run(
        &mut f.conn,
        command("ZRANGE")
            .arg(format!("{kp}:permits"))
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .clone(),
    );
    assert_eq!(scores.len(), 2);
    assert_eq!(scores[0].1, scores[1].1, "both members of the weight of 2");
}

#[test]
fn inspect_says_how_a_name_is_held_and_who_waits() {
    let mut f = fixture();
    f.listen(2);
    assert_eq!(f.inspect().how, HeldAs::Free);
    assert!(taken(&f.acquire(Hold::Shared, &token(1, 1), None)));
    assert!(!taken(&f.acquire(
        Hold::Exclusive,
        &token(2, 2),
        Some((&place(2, 1), 100))
    )));
    let seen = f.inspect();
    assert_eq!(
        (seen.how, seen.members, seen.waiting, seen.writers),
        (HeldAs::Readers, 1, 1, 1)
    );
    assert_eq!(READERS_OWNER, Owner::Readers.number());
}

/// A user with exactly the library's rule runs every step.
#[test]
fn the_least_privilege_user_runs_every_step() {
    use crate::protocol::commands::{AclRule, Deployment};
    let mut f = fixture();
    let rule = AclRule::new(Deployment::Standalone)
        .key_prefix("t:")
        .user("engine", "pw");
    let () = run(&mut f.conn, command("ACL").arg(rule.args()).clone());
    let mut admin = std::mem::replace(
        &mut f.conn,
        redis::Client::open(format!("redis://engine:pw@{}", f.node.addr()))
            .unwrap()
            .get_connection()
            .unwrap(),
    );
    let () = run(&mut admin, command("ACL").arg("LOG").arg("RESET").clone());
    f.listen(2);
    let (w, r) = (token(1, 1), token(2, 2));
    assert!(taken(&f.acquire(Hold::Exclusive, &w, None)));
    assert!(!taken(&f.acquire(
        Hold::Shared,
        &r,
        Some((&place(2, 1), 100))
    )));
    let _ = f.inspect();
    assert!(f.release(Hold::Exclusive, &w));
    assert!(taken(&f.acquire(
        Hold::Shared,
        &r,
        Some((&place(2, 1), 100))
    )));
    let (cmd, _) = ClaimRenew {
        holds: [(KEY, r.as_str(), TTL)].into_iter(),
        hold: Hold::Shared,
        bound: false,
    }
    .call();
    let renewed: PerName = cmd.query(&mut f.conn).unwrap();
    assert!(renewed.all());
    assert!(f.release(Hold::Shared, &r));
    let log: Vec<redis::Value> = run(&mut admin, command("ACL").arg("LOG").clone());
    assert!(log.is_empty(), "refused: {log:?}");
}
