//! The engine workload ([`Settings::engine`]): every mode on shared names.
//! Clients take, on the same few lock names, exclusive locks
//! (`write_lock`, or `lock` where nobody reads), read locks (`read_lock`)
//! and sets of 2 or 3 of them (`lock_all` with `and_read`: each name
//! written or read), and permits of a semaphore on a name of its own (a
//! name is a lock or a semaphore, never both): `acquire` with a weight.
//! Each kind is also tried once (`try_` forms), some leases kept alive.
//!
//! Besides the history (every call, a set's per name with that name's
//! mode and token, as [`multi`](super::multi) records them), every
//! acquire call goes into the run's [`Journal`]: who asked, for which
//! names in which mode and weight, when it arrived (just before the call,
//! that is, before its first attempt), when it ended, how long it may
//! wait, its client's node timeout, and what it got or why not; the
//! engine checker judges the order of the waiters from it.
//!
//! The critical section of a single lease is the other workloads' (a
//! writer writes its counter and the fenced store, a reader or a permit
//! reads); a set reads each of its names and writes those it holds
//! alone.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redlease::{Acquire, Semaphore, TryAcquire};

use super::multi::{critical_section_all, lock_index, HeldAll};
use super::{
    critical_section, guarded, lock_name, worker_seed, Client, Held, Ran, Request, Settings,
    MAX_CYCLES,
};
use crate::engine_checker::{Asked, Want};
use crate::history::{Call, LeaseId, Mode, Multi, NotCounted};

/// Each semaphore's number of permits, `N`: fewer than the clients that
/// want them at once, so permits run out and waiters queue.
pub const PERMITS: u32 = 2;

/// The weights a permit is drawn with, one at random: mostly one permit,
/// sometimes all [`PERMITS`] at once (a large weight, which the small
/// ones must not overtake).
pub const PERMIT_WEIGHTS: &[u32] = &[1, 1, 2];

/// A kind of acquisition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Write,
    Read,
    Permit,
    Set,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::Write, Kind::Read, Kind::Permit, Kind::Set];

    pub fn label(self) -> &'static str {
        match self {
            Kind::Write => "write",
            Kind::Read => "read",
            Kind::Permit => "permit",
            Kind::Set => "set",
        }
    }

    /// How often it is drawn, relative to the others in the run.
    fn share(self) -> f64 {
        match self {
            Kind::Write => 0.3,
            Kind::Read => 0.3,
            // On a name of its own, which the permit workers keep busy.
            Kind::Permit => 0.15,
            Kind::Set => 0.25,
        }
    }
}

/// Which kinds a run draws (`--modes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Modes([bool; 4]);

impl Modes {
    pub const ALL: Modes = Modes([true; 4]);

    /// A comma-separated list of `write`, `read`, `permit`, `set`.
    pub fn parse(text: &str) -> Result<Modes, String> {
        let mut on = [false; 4];
        for word in text.split(',').map(str::trim) {
            let i = Kind::ALL
                .iter()
                .position(|k| k.label() == word)
                .ok_or_else(|| {
                    format!("{word:?} is not a mode (write, read, permit, set, comma-separated)")
                })?;
            on[i] = true;
        }
        Ok(Modes(on))
    }

    pub fn contains(self, kind: Kind) -> bool {
        Kind::ALL
            .iter()
            .position(|&k| k == kind)
            .is_some_and(|i| self.0[i])
    }

    pub fn kinds(self) -> impl Iterator<Item = Kind> {
        Kind::ALL.into_iter().filter(move |&k| self.contains(k))
    }

    /// "write, read, permit, set".
    pub fn label(self) -> String {
        self.kinds().map(Kind::label).collect::<Vec<_>>().join(",")
    }
}

/// The engine workload's knobs ([`Settings::engine`]).
#[derive(Clone, Debug)]
pub struct Mix {
    pub modes: Modes,
    /// Workers from this one on take permits only (when the run draws
    /// permits): the others spend most of their time on the lock names,
    /// and without them a semaphore would seldom run out.
    pub permit_workers_from: usize,
    /// Semaphore names, numbered after the lock names.
    pub semaphores: usize,
    /// Each semaphore's `N`.
    pub permits: u32,
}

impl Mix {
    /// The semaphores' names (lock numbers), after `locks` lock names.
    pub fn semaphore_names(&self, locks: usize) -> std::ops::Range<usize> {
        locks..locks + self.semaphores
    }
}

/// Every acquire call of a run, as the engine checker reads them; cheap
/// to clone.
#[derive(Clone, Default)]
pub struct Journal(Arc<Mutex<Vec<Asked>>>);

impl Journal {
    pub fn push(&self, asked: Asked) {
        self.0.lock().expect("journal lock").push(asked);
    }

    /// Everything journaled, by arrival.
    pub fn asked(&self) -> Vec<Asked> {
        let mut all = self.0.lock().expect("journal lock").clone();
        all.sort_by_key(|a| (a.arrived, a.worker));
        all
    }
}

/// What to ask for: one name, or a set (sorted by lock, at least one
/// name written).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ask {
    One(Want),
    Set(Vec<Want>),
}

impl Ask {
    pub fn wants(&self) -> &[Want] {
        match self {
            Ask::One(want) => std::slice::from_ref(want),
            Ask::Set(wants) => wants,
        }
    }
}

/// What an [`Ask`] got.
pub enum Taken {
    One(Held),
    Set(HeldAll),
}

/// A permit of `weight`, waited for.
fn permits_waiting<'a>(semaphore: &Semaphore<'a>, weight: u32) -> Acquire<'a> {
    semaphore.acquire_many(weight)
}

/// A permit of `weight`, tried once.
fn permits_once<'a>(semaphore: &Semaphore<'a>, weight: u32) -> TryAcquire<'a> {
    semaphore.try_acquire_many(weight)
}

impl Client {
    /// Asks for `ask` as `request` says (its mode is `ask`'s; `once`: the
    /// `try_` form), with semaphores of `permits`; records the call in the
    /// history (a set's per name) and in `journal`.
    pub async fn ask(
        &mut self,
        ask: &Ask,
        request: Request,
        permits: u32,
        journal: &Journal,
    ) -> Option<Taken> {
        let locker = &self.locker;
        let read_write = self.read_write;
        let invoke = Instant::now();
        let ran = guarded(async move {
            let name = |want: &Want| lock_name(want.lock);
            if request.once {
                let req = match ask {
                    Ask::One(want) => match want.mode {
                        Mode::Read => locker.try_read_lock(name(want)),
                        Mode::Write => locker.try_lock(name(want)),
                        Mode::Permit => {
                            permits_once(&locker.semaphore(name(want), permits), want.weight)
                        }
                    },
                    Ask::Set(wants) => {
                        let (written, read) = split(wants);
                        locker.try_lock_all(written).and_read(read)
                    }
                };
                request.shape_try(req).await
            } else {
                let req = match ask {
                    Ask::One(want) => match want.mode {
                        Mode::Read => locker.read_lock(name(want)),
                        Mode::Write if read_write => locker.write_lock(name(want)),
                        Mode::Write => locker.lock(name(want)),
                        Mode::Permit => {
                            permits_waiting(&locker.semaphore(name(want), permits), want.weight)
                        }
                    },
                    Ask::Set(wants) => {
                        let (written, read) = split(wants);
                        locker.lock_all(written).and_read(read)
                    }
                };
                request.shape(req).await
            }
        })
        .await;
        let call = if request.once {
            Call::TryLock
        } else {
            Call::Lock
        };
        let wants = ask.wants();
        let wait = request.wait.unwrap_or(self.wait);
        let mut op = self.op(wants[0].lock, None, call, invoke);
        op.mode = wants[0].mode;
        if call == Call::Lock {
            op.bound = Some(self.lock_bound(wait));
        }
        let multi = matches!(ask, Ask::Set(_)).then(|| Multi {
            attempt: self.rec.next_attempt(),
            locks: wants.iter().map(|w| w.lock).collect(),
        });
        op.multi = multi.clone();
        let mut asked = Asked {
            worker: self.worker,
            waits: !request.once,
            set: multi.is_some(),
            wants: wants.to_vec(),
            arrived: op.invoke,
            ended: op.complete,
            wait,
            node_timeout: self.node_timeout,
            leases: Vec::new(),
            error: None,
            node_errors: 0,
        };
        let taken = match ran {
            Ran::Ok(lease) => {
                op.valid_until = Some(self.rec.at(lease.valid_until()));
                // The names by the lease's own word, each with its mode and
                // token.
                let names: Vec<(usize, LeaseId, Option<u64>)> = lease
                    .resources()
                    .filter_map(|name| {
                        let lock = lock_index(name)?;
                        let mut part = op.clone();
                        part.lock = lock;
                        part.lease = Some(self.rec.next_lease());
                        part.token = lease.fencing_token_of(name);
                        part.mode = lease.mode_of(name).map_or(op.mode, Mode::of);
                        let named = (lock, part.lease?, part.token);
                        self.rec.push(part);
                        Some(named)
                    })
                    .collect();
                asked.leases = names.iter().map(|&(lock, id, _)| (lock, id)).collect();
                match multi {
                    Some(multi) => Some(Taken::Set(HeldAll {
                        lease,
                        multi,
                        names,
                        kept_alive: request.keep_alive,
                    })),
                    None => names.first().map(|&(lock, id, _)| {
                        Taken::One(Held {
                            lease,
                            id,
                            lock,
                            kept_alive: request.keep_alive,
                        })
                    }),
                }
            }
            other => {
                if let Ran::Err(e) = &other {
                    op.not_counted = NotCounted::of(e);
                    asked.node_errors = e.node_errors().len() as u32;
                }
                op.outcome = Self::failed(other);
                asked.error = op.error();
                self.rec.push(op);
                None
            }
        };
        journal.push(asked);
        taken
    }
}

impl Client {
    /// The engine controls' broken release, done on the soak's side (the
    /// library has no switch for it): every key of the lease's name but
    /// its fencing counter (the lock, and whatever the library keeps
    /// beside it: its waiters' queue, marks, reservations) deleted on every
    /// node of `addrs`, so that nobody waiting is woken or served next.
    /// Recorded as the lease's release; the lease is dropped afterwards,
    /// and the library's own release in the background finds nothing.
    /// How many keys were deleted.
    pub async fn release_forgetting_waiters(
        &mut self,
        held: Held,
        addrs: &[String],
    ) -> Result<u64, String> {
        let mut op = self.lease_op(&held.part(), Call::Release, Instant::now());
        let key = self.locker.admin().key(held.lease.resource());
        let deleted = delete_all_but_fence(addrs, &key).await;
        op.complete = self.rec.now();
        if let Err(e) = &deleted {
            op.outcome =
                crate::history::Outcome::Failed(crate::history::ErrorKind::Data, e.clone());
        }
        self.rec.push(op);
        drop(held);
        deleted
    }
}

/// Deletes every key that starts with `key` but its fencing counter
/// (`:fence`) on every node of `addrs`; how many there were. Each node's
/// scan and deletes are bounded by 2 s.
pub async fn delete_all_but_fence(addrs: &[String], key: &str) -> Result<u64, String> {
    let mut deleted = 0;
    for addr in addrs {
        let on_node = async {
            let client = redis::Client::open(format!("redis://{addr}"))?;
            let mut conn = client.get_multiplexed_async_connection().await?;
            let mut cursor: u64 = 0;
            let mut found = Vec::new();
            // Bounded: a control's node holds a handful of keys.
            for _ in 0..1000 {
                let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(format!("{key}*"))
                    .arg("COUNT")
                    .arg(1000)
                    .query_async(&mut conn)
                    .await?;
                found.extend(keys.into_iter().filter(|k| !k.ends_with(":fence")));
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
            if found.is_empty() {
                return Ok(0);
            }
            redis::cmd("DEL")
                .arg(&found)
                .query_async::<u64>(&mut conn)
                .await
        };
        deleted += tokio::time::timeout(Duration::from_secs(2), on_node)
            .await
            .map_err(|_| format!("deleting {key}* on {addr} timed out"))?
            .map_err(|e| format!("deleting {key}* on {addr}: {e}"))?;
    }
    Ok(deleted)
}

/// A set's names: those written, those read.
fn split(wants: &[Want]) -> (Vec<String>, Vec<String>) {
    let names = |read: bool| {
        wants
            .iter()
            .filter(|w| (w.mode == Mode::Read) == read)
            .map(|w| lock_name(w.lock))
            .collect()
    };
    (names(false), names(true))
}

/// The next acquisition of `worker`: a kind the run draws (by
/// [`Kind::share`]; a permit for the permit workers), its names, and how
/// it is taken.
pub fn draw(
    settings: &Settings,
    mix: &Mix,
    worker: usize,
    keep_alive_share: f64,
    rng: &mut StdRng,
) -> (Ask, Request) {
    let permits_only = worker >= mix.permit_workers_from && mix.modes.contains(Kind::Permit);
    let kinds: Vec<Kind> = match permits_only {
        true => vec![Kind::Permit],
        false => mix.modes.kinds().collect(),
    };
    let total: f64 = kinds.iter().map(|k| k.share()).sum();
    let mut pick = rng.random::<f64>() * total;
    let kind = kinds
        .iter()
        .copied()
        .find(|k| {
            pick -= k.share();
            pick < 0.0
        })
        .unwrap_or(kinds[kinds.len() - 1]);
    let ask = match kind {
        Kind::Write | Kind::Read => Ask::One(Want {
            lock: rng.random_range(0..settings.locks),
            mode: if kind == Kind::Read {
                Mode::Read
            } else {
                Mode::Write
            },
            weight: 1,
        }),
        Kind::Permit => Ask::One(Want {
            lock: rng.random_range(mix.semaphore_names(settings.locks)),
            mode: Mode::Permit,
            weight: PERMIT_WEIGHTS[rng.random_range(0..PERMIT_WEIGHTS.len())],
        }),
        Kind::Set => {
            let k = rng.random_range(2..=3).min(settings.locks);
            let mut locks = rand::seq::index::sample(rng, settings.locks, k).into_vec();
            locks.sort_unstable();
            let mut wants: Vec<Want> = locks
                .into_iter()
                .map(|lock| Want {
                    lock,
                    mode: if rng.random_bool(0.5) {
                        Mode::Read
                    } else {
                        Mode::Write
                    },
                    weight: 1,
                })
                .collect();
            if wants.iter().all(|w| w.mode == Mode::Read) {
                wants[0].mode = Mode::Write;
            }
            Ask::Set(wants)
        }
    };
    let request = Request {
        mode: ask.wants()[0].mode,
        once: rng.random_bool(settings.try_share),
        ttl: None,
        wait: None,
        keep_alive: keep_alive_share > 0.0 && rng.random_bool(keep_alive_share),
    };
    (ask, request)
}

/// Runs critical sections until `deadline` (the one in progress
/// finishes), journaling every acquire call in `journal`.
pub async fn work(
    mut client: Client,
    settings: Arc<Settings>,
    seed: u64,
    deadline: Instant,
    journal: Journal,
) {
    let Some(mix) = settings.engine.clone() else {
        return;
    };
    let mut rng = StdRng::seed_from_u64(worker_seed(seed, client.worker));
    let keep_alive_share = if settings.patient.contains(&client.worker) {
        0.0
    } else {
        settings.keep_alive_share
    };
    for _ in 0..MAX_CYCLES {
        if Instant::now() >= deadline {
            break;
        }
        let (ask, request) = draw(&settings, &mix, client.worker, keep_alive_share, &mut rng);
        match client.ask(&ask, request, mix.permits, &journal).await {
            Some(Taken::One(held)) => {
                critical_section(&mut client, held, &settings, &mut rng).await
            }
            Some(Taken::Set(held)) => {
                let hold = |kept_alive, at| settings.hold(kept_alive, at);
                critical_section_all(&mut client, held, &settings, &mut rng, hold).await
            }
            // Do not hammer names a try found busy.
            None => tokio::time::sleep(Duration::from_millis(rng.random_range(0..=5))).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_from_a_list_and_refuse_other_words() {
        assert_eq!(Modes::parse("write").unwrap().label(), "write");
        assert_eq!(
            Modes::parse("set, read,write").unwrap().label(),
            "write,read,set"
        );
        assert_eq!(Modes::ALL.label(), "write,read,permit,set");
        assert!(Modes::parse("write,exclusive").is_err());
        assert!(Modes::parse("").is_err());
    }

    #[test]
    fn the_engine_workload_draws_every_kind_on_its_own_names() {
        let settings = Settings::engine(false, Modes::ALL);
        let mix = settings.engine.clone().unwrap();
        let mut rng = StdRng::seed_from_u64(7);
        let draws: Vec<(Ask, Request)> = (0..2000)
            .map(|_| draw(&settings, &mix, 0, settings.keep_alive_share, &mut rng))
            .collect();
        let count = |f: &dyn Fn(&Ask) -> bool| draws.iter().filter(|(a, _)| f(a)).count();
        let single = |mode| move |a: &Ask| matches!(a, Ask::One(w) if w.mode == mode);
        let (write, read, permit) = (
            count(&single(Mode::Write)),
            count(&single(Mode::Read)),
            count(&single(Mode::Permit)),
        );
        let sets = count(&|a| matches!(a, Ask::Set(_)));
        assert!((500..700).contains(&write), "{write} writes");
        assert!((500..700).contains(&read), "{read} reads");
        assert!((200..400).contains(&permit), "{permit} permits");
        assert!((400..600).contains(&sets), "{sets} sets");
        for (ask, request) in &draws {
            assert_eq!(request.mode, ask.wants()[0].mode);
            match ask {
                Ask::One(w) if w.mode == Mode::Permit => {
                    assert_eq!(w.lock, settings.locks, "the semaphore's own name");
                    assert!(PERMIT_WEIGHTS.contains(&w.weight));
                }
                Ask::One(w) => assert!(w.lock < settings.locks && w.weight == 1),
                Ask::Set(wants) => {
                    assert!((2..=3).contains(&wants.len()));
                    assert!(wants.windows(2).all(|p| p[0].lock < p[1].lock));
                    assert!(wants.iter().any(|w| w.mode == Mode::Write));
                    assert!(wants.iter().all(|w| w.lock < settings.locks));
                }
            }
        }
        // Some tried once, some kept alive.
        let once = draws.iter().filter(|(_, r)| r.once).count();
        assert!((200..400).contains(&once), "{once} once");
        assert!(draws.iter().any(|(_, r)| r.keep_alive));
        // The last workers take permits only.
        assert_eq!((settings.workers, mix.permit_workers_from), (10, 8));
        assert!(!settings.proxied.contains(&8) && !settings.patient.contains(&9));
        for worker in [8, 9] {
            for _ in 0..100 {
                let (ask, _) = draw(&settings, &mix, worker, 0.1, &mut rng);
                assert!(
                    matches!(ask, Ask::One(w) if w.mode == Mode::Permit),
                    "{ask:?}"
                );
            }
        }
    }

    #[test]
    fn an_exclusive_only_run_draws_single_writers() {
        let settings = Settings::engine(false, Modes::parse("write").unwrap());
        let mix = settings.engine.clone().unwrap();
        let mut rng = StdRng::seed_from_u64(9);
        for _ in 0..500 {
            // The permit workers too, when the run draws no permits.
            let (ask, _) = draw(&settings, &mix, 9, 0.0, &mut rng);
            assert!(
                matches!(ask, Ask::One(w) if w.mode == Mode::Write),
                "{ask:?}"
            );
        }
        let (written, read) = split(&[
            Want {
                lock: 0,
                mode: Mode::Read,
                weight: 1,
            },
            Want {
                lock: 2,
                mode: Mode::Write,
                weight: 1,
            },
        ]);
        assert_eq!((written, read), (vec![lock_name(2)], vec![lock_name(0)]));
    }
}
