//! The model checked as CI runs it: every world explored breadth first to
//! a bounded depth (every path of that many steps), each property kept and
//! each example found; the liveness world explored to its end; and each
//! negative control broken, with its shortest trace. Deeper runs:
//! `cargo run --release -p redlease-model -- --depth D`.

use redlease_model::check::{check, check_control, Outcome};
use redlease_model::model::SERVED;
use redlease_model::trace::render;
use redlease_model::world::{Control, World};

/// The depth each world is explored to here: what fits in a few seconds
/// each on two cores (the figures for deeper runs are in docs/safety.md).
fn ci_depth(world: &World) -> Option<usize> {
    match world.name {
        // The liveness world is small: explored to its end (a waiter not
        // served is seen only where a path ends).
        "queue" => None,
        "semaphore" => Some(18),
        "single" => Some(22),
        _ => Some(20),
    }
}

fn explain(outcome: &Outcome) -> String {
    let mut out = format!(
        "world {}: {} distinct states, depth {}\n",
        outcome.world.name, outcome.unique, outcome.depth
    );
    for (property, path) in &outcome.broken {
        out += &format!("broke \"{property}\":\n{}", render(&outcome.world, path));
    }
    for property in &outcome.unexampled {
        out += &format!("no example of \"{property}\"\n");
    }
    out
}

#[test]
fn every_world_keeps_every_property() {
    for world in World::all() {
        let depth = ci_depth(&world);
        let outcome = check(world, depth, 2);
        println!("{}", explain(&outcome));
        assert!(outcome.unique > 1_000, "{}", explain(&outcome));
        assert!(
            outcome.broken.is_empty() && outcome.unexampled.is_empty(),
            "{}",
            explain(&outcome)
        );
        if outcome.world.fair {
            assert!(outcome.properties.contains(&SERVED));
        }
    }
}

#[test]
fn each_negative_control_breaks_its_property() {
    for control in Control::ALL {
        let outcome = check_control(control, Some(24));
        let broke = outcome.broken.iter().find(|(p, _)| *p == control.breaks());
        let Some((_, path)) = broke else {
            panic!("{} did not break \"{}\"", control.name(), control.breaks());
        };
        let trace = render(&outcome.world, path);
        println!("{}:\n{trace}", control.name());
        // The shortest trace ends where the property first breaks.
        assert!(trace.lines().count() > 2, "{trace}");
    }
}
