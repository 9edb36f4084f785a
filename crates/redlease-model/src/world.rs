//! The world a check explores: how many servers and clients, the holds the
//! clients take, the lease's timing (the library's own `Timing`), how far
//! the servers' clocks may run fast, which faults may happen and how
//! often, and how far time runs. Time is whole milliseconds ("ticks")
//! from the start of the world.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use redlease::rules::{ModelHold, Timing};

/// A moment of the world, in milliseconds from its start.
pub type Tick = u8;

/// The instant of tick `t`, for the library's rules (which take instants).
pub fn at(t: Tick) -> Instant {
    base() + Duration::from_millis(t.into())
}

/// The first tick at or after `i`.
pub fn tick_at_or_after(i: Instant) -> u64 {
    let d = i.saturating_duration_since(base());
    let ms = d.as_millis() as u64;
    match d > Duration::from_millis(ms) {
        true => ms + 1,
        false => ms,
    }
}

fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

/// A rule of the library turned off, which the checker must catch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Control {
    /// A semaphore's permit counted at a plain majority of nodes.
    MajoritySemaphore,
    /// A server that restarted empty votes at once.
    NoQuarantine,
    /// Validity without the drift allowance.
    NoDrift,
    /// A release that deletes the key whoever holds it.
    UncheckedRelease,
    /// A fencing counter that restarts from the clock cut to 100 ms even
    /// on a server that just restarted (the rule before this model).
    AlwaysCutCounter,
}

impl Control {
    pub const ALL: [Control; 5] = [
        Control::MajoritySemaphore,
        Control::NoQuarantine,
        Control::NoDrift,
        Control::UncheckedRelease,
        Control::AlwaysCutCounter,
    ];

    /// The control as the command line spells it.
    pub fn name(self) -> &'static str {
        match self {
            Control::MajoritySemaphore => "majority-semaphore",
            Control::NoQuarantine => "no-quarantine",
            Control::NoDrift => "no-drift",
            Control::UncheckedRelease => "unchecked-release",
            Control::AlwaysCutCounter => "always-cut-counter",
        }
    }

    /// The property whose break shows the rule matters.
    pub fn breaks(self) -> &'static str {
        match self {
            Control::MajoritySemaphore => crate::model::PERMITS,
            Control::AlwaysCutCounter => crate::model::FENCING,
            _ => crate::model::EXCLUSION,
        }
    }

    /// The world it is checked in.
    pub fn world(self) -> World {
        let world = match self {
            Control::MajoritySemaphore => World::semaphore(),
            Control::NoQuarantine | Control::NoDrift => World::exclusive(),
            Control::UncheckedRelease | Control::AlwaysCutCounter => World::single(),
        };
        world.with_control(self)
    }
}

/// One world to explore. See the presets ([`World::exclusive`] and the
/// others) for the worlds the checks run.
#[derive(Clone, Debug)]
pub struct World {
    pub name: &'static str,
    pub nodes: usize,
    /// Each client's hold of the one name.
    pub holds: Vec<ModelHold>,
    /// The lease's timing, as a Locker derives it.
    pub timing: Timing,
    /// How much earlier than its TTL a server may expire a key, in ticks:
    /// its clock running fast. At most the drift allowance.
    pub fast: Tick,
    /// The restart quarantine (the Locker's default: the TTL plus drift).
    pub quarantine: Duration,
    /// Time stops here.
    pub horizon: Tick,
    /// Messages the network may lose, in all.
    pub losses: u8,
    /// Empty restarts the servers may take, in all.
    pub restarts: u8,
    /// Acquisitions (acquire calls) each client makes.
    pub attempts: u8,
    /// Whether holders keep their leases alive.
    pub renew: bool,
    /// A reservation's handoff window, in ticks.
    pub window: Tick,
    /// How often a kept-alive lease is renewed, as a fraction of the TTL.
    pub fraction: f64,
    /// A fair world: nothing is lost or restarted, every message is
    /// delivered before time moves on, and every client acts on what is
    /// due before time moves on (the liveness check's world).
    pub fair: bool,
    pub control: Option<Control>,
}

/// The lease timing every world uses: a TTL of 5 ms, a drift allowance of
/// exactly 1 ms (factor 0, floor 1 ms: whole ticks, so the model's
/// discrete time loses nothing), and the 1 ms node timeout a Locker
/// derives for it.
fn timing(drift_floor: Duration) -> Timing {
    Timing::new(Duration::from_millis(5), 0.0, drift_floor, None)
        .expect("the model's timing is one a Locker accepts")
}

impl World {
    /// Two clients taking one lock alone on three servers, racing for it,
    /// with one empty restart.
    pub fn exclusive() -> World {
        let timing = timing(Duration::from_millis(1));
        World {
            name: "exclusive",
            nodes: 3,
            holds: vec![ModelHold::Exclusive; 2],
            timing,
            fast: 1,
            quarantine: timing.ttl() + timing.drift(),
            horizon: 12,
            losses: 0,
            restarts: 1,
            attempts: 1,
            renew: false,
            window: 2,
            fraction: 1.0 / 3.0,
            fair: false,
            control: None,
        }
    }

    /// The same with a lossy network instead of the restart: one request
    /// (or its reply) lost or late, applied any time later or never.
    pub fn lossy() -> World {
        World {
            name: "lossy",
            losses: 1,
            restarts: 0,
            ..World::exclusive()
        }
    }

    /// Holders that keep their leases alive, over a lossy network.
    pub fn renewal() -> World {
        World {
            name: "renewal",
            renew: true,
            ..World::lossy()
        }
    }

    /// A writer and a reader of one name on three servers.
    pub fn read_write() -> World {
        World {
            name: "read-write",
            holds: vec![ModelHold::Exclusive, ModelHold::Shared],
            ..World::exclusive()
        }
    }

    /// Three clients sharing a semaphore of two permits on three servers.
    pub fn semaphore() -> World {
        let permit = ModelHold::Permit {
            permits: 2,
            majority: false,
        };
        World {
            name: "semaphore",
            holds: vec![permit; 3],
            horizon: 6,
            restarts: 0,
            ..World::exclusive()
        }
    }

    /// One server (the single-instance lock): two clients with two
    /// acquisitions each, a lossy network and an empty restart.
    pub fn single() -> World {
        World {
            name: "single",
            nodes: 1,
            attempts: 2,
            losses: 1,
            restarts: 1,
            ..World::exclusive()
        }
    }

    /// The liveness world: three servers, two clients that both want the
    /// lock, no faults, every due step taken before time moves on.
    pub fn queue() -> World {
        World {
            name: "queue",
            restarts: 0,
            fair: true,
            ..World::exclusive()
        }
    }

    /// The worlds the checks run.
    pub fn all() -> Vec<World> {
        vec![
            World::exclusive(),
            World::lossy(),
            World::renewal(),
            World::read_write(),
            World::semaphore(),
            World::single(),
            World::queue(),
        ]
    }

    /// This world with `control`'s rule turned off.
    pub fn with_control(mut self, control: Control) -> World {
        self.control = Some(control);
        match control {
            Control::MajoritySemaphore => {
                for hold in &mut self.holds {
                    if let ModelHold::Permit { majority, .. } = hold {
                        *majority = true;
                    }
                }
            }
            Control::NoQuarantine => self.quarantine = Duration::ZERO,
            Control::NoDrift => {
                self.timing = Timing::new(self.timing.ttl(), 0.0, Duration::ZERO, None)
                    .expect("a TTL with no drift allowance is accepted");
            }
            Control::UncheckedRelease | Control::AlwaysCutCounter => {}
        }
        self
    }

    /// The TTL in ticks.
    pub fn ttl(&self) -> Tick {
        self.timing.ttl().as_millis() as Tick
    }

    /// The node timeout in ticks (at least one).
    pub fn node_timeout(&self) -> Tick {
        (tick_at_or_after(at(0) + self.timing.node_timeout()) as Tick).max(1)
    }

    /// The permits of the world's semaphore, if its clients hold permits.
    pub fn permits(&self) -> Option<u32> {
        self.holds.iter().find_map(|h| match h {
            ModelHold::Permit { permits, .. } => Some(*permits),
            _ => None,
        })
    }
}
