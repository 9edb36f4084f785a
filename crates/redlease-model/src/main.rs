//! `cargo run --release -p redlease-model -- [--depth D] [--world NAME]
//! [--control NAME] [--threads N]`: explores the worlds (and the negative
//! controls, each of which must break), and prints the states explored per
//! world and each broken property's shortest trace.

use std::process::ExitCode;

use redlease_model::check::{check, check_control, Outcome};
use redlease_model::trace::render;
use redlease_model::world::{Control, World};

const USAGE: &str = "usage: redlease-model [--depth D] [--world NAME|all|none] \
[--control NAME|all|none] [--horizon T] [--faults L,R] [--threads N]
  --depth D     explore paths of at most D steps (default: until time runs out)
  --world       exclusive, read-write, semaphore, single, queue (default: all)
  --control     majority-semaphore, no-quarantine, no-drift, unchecked-release,
                always-cut-counter (default: all)
  --horizon T   stop time at T ms (default: each world's own)
  --faults L,R  at most L requests lost and R empty restarts (default: each world's own)
  --threads N   checker threads (default: 2)";

fn main() -> ExitCode {
    let mut depth = None;
    let mut worlds = World::all();
    let mut controls = Control::ALL.to_vec();
    let mut threads = 2;
    let mut horizon = None;
    let mut faults = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().unwrap_or_default();
        match arg.as_str() {
            "--depth" => match value().parse() {
                Ok(d) => depth = Some(d),
                Err(_) => return usage("--depth takes a number of steps"),
            },
            "--horizon" => match value().parse() {
                Ok(h) => horizon = Some(h),
                Err(_) => return usage("--horizon takes a number of milliseconds"),
            },
            "--faults" => {
                let v = value();
                let mut parts = v.split(',').map(str::parse::<u8>);
                match (parts.next(), parts.next()) {
                    (Some(Ok(l)), Some(Ok(r))) => faults = Some((l, r)),
                    _ => return usage("--faults takes LOSSES,RESTARTS"),
                }
            }
            "--threads" => match value().parse() {
                Ok(n) => threads = n,
                Err(_) => return usage("--threads takes a number"),
            },
            "--world" => {
                let v = value();
                worlds = match v.as_str() {
                    "all" => World::all(),
                    "none" => Vec::new(),
                    _ => match World::all().into_iter().find(|w| w.name == v) {
                        Some(w) => vec![w],
                        None => return usage(&format!("no world {v:?}")),
                    },
                }
            }
            "--control" => {
                let v = value();
                controls = match v.as_str() {
                    "all" => Control::ALL.to_vec(),
                    "none" => Vec::new(),
                    _ => match Control::ALL.into_iter().find(|c| c.name() == v) {
                        Some(c) => vec![c],
                        None => return usage(&format!("no control {v:?}")),
                    },
                }
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            other => return usage(&format!("unknown argument {other:?}")),
        }
    }
    let mut failed = false;
    for mut world in worlds {
        if let Some(h) = horizon {
            world.horizon = h;
        }
        if let Some((losses, restarts)) = faults {
            world.losses = losses;
            world.restarts = restarts;
        }
        let outcome = check(world, depth, threads);
        report(&outcome);
        failed |= !outcome.broken.is_empty() || !outcome.unexampled.is_empty();
    }
    for control in controls {
        let outcome = check_control(control, depth);
        let broke = outcome.broken.iter().find(|(p, _)| *p == control.breaks());
        println!(
            "control {}: {} distinct states, depth {}, {:.1} s",
            control.name(),
            outcome.unique,
            outcome.depth,
            outcome.took.as_secs_f64()
        );
        match broke {
            Some((property, path)) => {
                println!("  broke \"{property}\" as it must; shortest trace:");
                for line in render(&outcome.world, path).lines() {
                    println!("    {line}");
                }
            }
            None => {
                println!("  FAILED: \"{}\" did not break", control.breaks());
                failed = true;
            }
        }
    }
    match failed {
        true => ExitCode::FAILURE,
        false => ExitCode::SUCCESS,
    }
}

fn report(outcome: &Outcome) {
    println!(
        "world {}: {} distinct states ({} generated), depth {}, {:.1} s",
        outcome.world.name,
        outcome.unique,
        outcome.generated,
        outcome.depth,
        outcome.took.as_secs_f64()
    );
    for property in &outcome.properties {
        let verdict = match outcome.broken.iter().find(|(p, _)| p == property) {
            Some(_) => "BROKEN",
            None if outcome.unexampled.contains(property) => "NO EXAMPLE",
            None => "holds",
        };
        println!("  {verdict:<10} {property}");
    }
    for (property, path) in &outcome.broken {
        println!("  shortest trace breaking \"{property}\":");
        for line in render(&outcome.world, path).lines() {
            println!("    {line}");
        }
    }
}

fn usage(why: &str) -> ExitCode {
    eprintln!("{why}\n{USAGE}");
    ExitCode::from(2)
}
