//! The multi-lock workload ([`Settings::multi`]): clients that take 2 or
//! 3 of the names at once with `lock_all` (`try_lock_all` when the draw
//! says once), and the rest of the time one of the same names with
//! `lock` (`try_lock`), so that multi-leases and single leases contend
//! for every name.
//!
//! A multi-lease is recorded per name (see [`history`](crate::history)):
//! its acquire once for each name the lease says it holds
//! ([`Lease::resources`]), with that name's lease number and fencing
//! token ([`Lease::fencing_token_of`]); its extends, release or abandon
//! once for each of them too, with the same times and outcome. A failed
//! attempt is one operation, on its first name.
//!
//! The critical section of a multi-lease is the single lock's for every
//! name: GET each name's counter, sleep, sometimes extend (the whole
//! lease), then for each name SET counter + 1 and a fenced write with the
//! name's token, each only if more than the write margin is left.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redlease::Lease;

use super::{
    critical_section, draw, guarded, lock_name, worker_seed, Client, Part, Ran, Request, Settings,
    MAX_CYCLES,
};
use crate::history::{Call, ErrorKind, LeaseId, Multi, NotCounted, Outcome};

/// How many names a multi-lock takes (at most the run's locks).
const NAMES: std::ops::RangeInclusive<usize> = 2..=3;

/// A multi-lease and what the history knows each of its names by.
pub struct HeldAll {
    pub lease: Lease,
    pub multi: Multi,
    /// Every name the lease holds, in its order: the lock, the name's
    /// lease number, its fencing token.
    pub names: Vec<(usize, LeaseId, Option<u64>)>,
    /// Taken with `keep_alive()`.
    pub kept_alive: bool,
}

impl HeldAll {
    /// Each name of the lease, as the calls under it are recorded.
    pub fn parts(&self) -> impl Iterator<Item = Part<'_>> {
        self.names.iter().map(|&(lock, id, token)| Part {
            lease: &self.lease,
            id,
            lock,
            token,
            multi: Some(&self.multi),
        })
    }
}

/// The lock of a name the soak gave (`soak-N`), if it is one.
pub fn lock_index(name: &str) -> Option<usize> {
    name.strip_prefix("soak-")?.parse().ok()
}

impl Client {
    /// `lock_all` (or `try_lock_all` when `request.once`) on the names of
    /// `locks`, recorded per name (see the module docs). `request.mode` is
    /// ignored: a multi-lock is exclusive.
    pub async fn take_all(&mut self, locks: &[usize], request: Request) -> Option<HeldAll> {
        let mut locks = locks.to_vec();
        locks.sort_unstable();
        locks.dedup();
        let multi = Multi {
            attempt: self.rec.next_attempt(),
            locks: locks.clone(),
        };
        let names: Vec<String> = locks.iter().map(|&l| lock_name(l)).collect();
        let call = if request.once {
            Call::TryLock
        } else {
            Call::Lock
        };
        let locker = &self.locker;
        let invoke = Instant::now();
        let ran = guarded(async move {
            if request.once {
                let req = locker.try_lock_all(names);
                request.shape_try(req).await
            } else {
                let req = locker.lock_all(names);
                request.shape(req).await
            }
        })
        .await;
        let mut op = self.op(locks[0], None, call, invoke);
        op.multi = Some(multi.clone());
        if call == Call::Lock {
            op.bound = Some(self.lock_bound(request.wait.unwrap_or(self.wait)));
        }
        match ran {
            Ran::Ok(lease) => {
                op.valid_until = Some(self.rec.at(lease.valid_until()));
                // The names by the lease's own word: the multi checker
                // compares them with the names asked for.
                let names: Vec<(usize, LeaseId, Option<u64>)> = lease
                    .resources()
                    .filter_map(|name| {
                        let lock = lock_index(name)?;
                        Some((lock, self.rec.next_lease(), lease.fencing_token_of(name)))
                    })
                    .collect();
                for &(lock, id, token) in &names {
                    let mut part = op.clone();
                    part.lock = lock;
                    part.lease = Some(id);
                    part.token = token;
                    self.rec.push(part);
                }
                Some(HeldAll {
                    lease,
                    multi,
                    names,
                    kept_alive: request.keep_alive,
                })
            }
            other => {
                if let Ran::Err(e) = &other {
                    op.not_counted = NotCounted::of(e);
                }
                op.outcome = Self::failed(other);
                self.rec.push(op);
                None
            }
        }
    }

    /// Records `call` over `[invoke, now]` with `outcome` once for each
    /// name of `held`, with `valid_until` as the lease's then.
    fn push_parts(&self, held: &HeldAll, call: Call, invoke: Instant, outcome: &Outcome) {
        for part in held.parts() {
            let mut op = self.lease_op(&part, call, invoke);
            op.outcome = outcome.clone();
            self.rec.push(op);
        }
    }

    /// Extends the whole multi-lease by the client's TTL.
    pub async fn extend_all(&mut self, held: &mut HeldAll) -> bool {
        let ttl = self.ttl;
        let invoke = Instant::now();
        let ran = guarded(held.lease.extend(ttl)).await;
        let ok = matches!(ran, Ran::Ok(()));
        self.push_parts(held, Call::Extend, invoke, &Self::failed(ran));
        ok
    }

    /// Releases the whole multi-lease; recorded for every name, with the
    /// validity and tokens it had. The error kind if it failed.
    pub async fn release_all(&mut self, held: HeldAll) -> Result<(), ErrorKind> {
        let HeldAll {
            lease,
            multi,
            names,
            ..
        } = held;
        let valid_until = self.rec.at(lease.valid_until());
        let mode = crate::history::Mode::of(lease.mode());
        let invoke = Instant::now();
        let ran = guarded(lease.release()).await;
        let outcome = Self::failed(ran);
        let result = match &outcome {
            Outcome::Failed(kind, _) => Err(*kind),
            _ => Ok(()),
        };
        for (lock, id, token) in names {
            let mut op = self.op(lock, Some(id), Call::Release, invoke);
            op.mode = mode;
            op.valid_until = Some(valid_until);
            op.token = token;
            op.outcome = outcome.clone();
            op.multi = Some(multi.clone());
            self.rec.push(op);
        }
        result
    }

    /// Drops the multi-lease without `release` (the library releases it
    /// in the background), recorded for every name first.
    pub fn abandon_all(&mut self, held: HeldAll) {
        let now = Instant::now();
        for part in held.parts() {
            let mut op = self.lease_op(&part, Call::Abandon, now);
            op.complete = op.invoke;
            self.rec.push(op);
        }
        drop(held);
    }
}

/// Runs critical sections until `deadline` (the one in progress
/// finishes): [`Settings::multi_share`] of them under a multi-lease of 2
/// or 3 random names, the rest under one random name's lock.
pub async fn work(mut client: Client, settings: Arc<Settings>, seed: u64, deadline: Instant) {
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
        let mut request = draw(&settings, keep_alive_share, &mut rng);
        let taken = if rng.random_bool(settings.multi_share) {
            let k = rng.random_range(NAMES).min(settings.locks);
            let locks = rand::seq::index::sample(&mut rng, settings.locks, k).into_vec();
            request.wait = settings.multi_wait;
            match client.take_all(&locks, request).await {
                Some(held) => {
                    // Up to the longest sleep, or keep-alive hold.
                    let hold = |kept_alive: bool, at: f64| match kept_alive {
                        true => settings.keep_alive_hold.mul_f64(at),
                        false => settings.max_sleep.mul_f64(at),
                    };
                    critical_section_all(&mut client, held, &settings, &mut rng, hold).await;
                    true
                }
                None => false,
            }
        } else {
            let lock = rng.random_range(0..settings.locks);
            match client.take(lock, request).await {
                Some(held) => {
                    critical_section(&mut client, held, &settings, &mut rng).await;
                    true
                }
                None => false,
            }
        };
        if !taken {
            // Do not hammer names a try found busy.
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..=5))).await;
        }
    }
}

/// Reads every name's counter, sleeps for `hold(kept_alive, draw)` (a
/// draw in [0, 1)), extends sometimes (unless kept alive), then writes
/// the counter + 1 and the fenced store of each name held alone (every
/// name of a `lock_all`); gives the lease up, now and then without
/// release. The engine workload's sets share it.
pub(super) async fn critical_section_all(
    client: &mut Client,
    mut held: HeldAll,
    settings: &Settings,
    rng: &mut StdRng,
    hold: impl Fn(bool, f64) -> Duration,
) {
    let mut seen = Vec::with_capacity(held.names.len());
    for part in held.parts() {
        match client.read_part(&part).await {
            Some(v) => seen.push(v),
            None => break,
        }
    }
    if seen.len() < held.names.len() {
        let _ = client.release_all(held).await;
        return;
    }
    tokio::time::sleep(hold(held.kept_alive, rng.random::<f64>())).await;
    if rng.random_bool(settings.extend_share) && !held.kept_alive {
        client.extend_all(&mut held).await;
    }
    for (part, seen) in held.parts().zip(seen) {
        if part.lease.mode_of(&lock_name(part.lock)) == Some(redlease::LockMode::Exclusive) {
            client.write_part(&part, seen + 1, false).await;
            client.fenced_write_part(&part, false).await;
        }
    }
    if rng.random_bool(settings.abandon_share) {
        client.abandon_all(held);
        return;
    }
    let _ = client.release_all(held).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Mode;

    #[test]
    fn names_map_back_to_their_locks() {
        assert_eq!(lock_index(&lock_name(3)), Some(3));
        assert_eq!(lock_index("soak-x"), None);
        assert_eq!(lock_index("other-1"), None);
    }

    #[test]
    fn the_multi_workload_takes_exclusive_locks_and_waits_longer_for_sets() {
        let settings = Settings::multi(false);
        assert_eq!((settings.locks, settings.multi_share), (4, 0.5));
        assert!(settings.unfenced.is_empty() && settings.permits.is_none());
        assert!(!settings.takes_read_locks());
        assert_eq!(settings.longest_wait(), settings.ttl * 8);
        assert_eq!(settings.lock_rounds(), 4);
        let mut rng = StdRng::seed_from_u64(7);
        for _ in 0..100 {
            let r = draw(&settings, settings.keep_alive_share, &mut rng);
            assert_eq!((r.mode, r.wait), (Mode::Write, None), "{r:?}");
        }
        // Other workloads wait as they did.
        assert_eq!(Settings::standard(false).longest_wait(), settings.ttl);
        assert_eq!(Settings::read_write(false).longest_wait(), settings.ttl * 6);
    }
}
