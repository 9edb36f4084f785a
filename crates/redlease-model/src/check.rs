//! Running the checker over a world: breadth first, so that the first
//! counterexample found for a property is a shortest one (on one thread:
//! see [`check_control`]).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use stateright::{Checker, HasDiscoveries, Model, Path};

use crate::model::{Action, LockModel, State};
use crate::world::{Control, World};

/// What one exploration found.
pub struct Outcome {
    pub world: World,
    /// Distinct states explored.
    pub unique: usize,
    /// States generated, repeats included.
    pub generated: usize,
    /// The longest path explored, in steps.
    pub depth: usize,
    pub took: Duration,
    /// Properties that failed (an `always` broken, an `eventually` not
    /// reached), each with its shortest trace.
    pub broken: Vec<(&'static str, Path<State, Action>)>,
    /// `sometimes` properties with no example: the model is vacuous there.
    pub unexampled: Vec<&'static str>,
    /// Every property, checked in this world.
    pub properties: Vec<&'static str>,
}

/// Explores `world` to `depth` steps (`None`: until time runs out), on
/// `threads` threads, and says what broke.
pub fn check(world: World, depth: Option<usize>, threads: usize) -> Outcome {
    run(world, depth, threads, None)
}

/// Explores the world of `control` until the property it must break
/// breaks (or the depth runs out). On one thread: several threads take
/// states from a shared queue out of depth order, and could report a
/// longer trace first.
pub fn check_control(control: Control, depth: Option<usize>) -> Outcome {
    let stop = HasDiscoveries::AnyOf(BTreeSet::from([control.breaks()]));
    run(control.world(), depth, 1, Some(stop))
}

fn run(
    world: World,
    depth: Option<usize>,
    threads: usize,
    stop: Option<HasDiscoveries>,
) -> Outcome {
    let model = LockModel::new(world.clone());
    let properties = model.properties();
    let names: Vec<&'static str> = properties.iter().map(|p| p.name).collect();
    let began = Instant::now();
    let mut builder = model.checker().threads(threads.max(1));
    if let Some(depth) = depth {
        builder = builder.target_max_depth(depth);
    }
    if let Some(stop) = stop {
        builder = builder.finish_when(stop);
    }
    let checker = builder.spawn_bfs().join();
    let took = began.elapsed();
    let mut broken = Vec::new();
    let mut unexampled = Vec::new();
    for p in &properties {
        let found = checker.discovery(p.name);
        match (p.expectation.discovery_is_failure(), found) {
            (true, Some(path)) => broken.push((p.name, path)),
            (false, None) => unexampled.push(p.name),
            _ => {}
        }
    }
    Outcome {
        world,
        unique: checker.unique_state_count(),
        generated: checker.state_count(),
        depth: checker.max_depth(),
        took,
        broken,
        unexampled,
        properties: names,
    }
}
