//! The elections workload ([`Settings::elections`]): campaigners and
//! observers of a few election names.
//!
//! A campaigner (a client of its own, with its own Locker) loops until the
//! run's deadline: it campaigns for one of the names, at random, with a
//! value of its own (`w{worker}-e{name}-c{n}`, unique in the run), waiting
//! in turn up to the run's wait; once it leads, it records the lead and
//! leads for a random time, watching `lost()` all along; in some leads it
//! proclaims a new value (`...-p{revision}`) once or twice on the way;
//! then it resigns, or now and then just drops the `Leadership` (the
//! library resigns in the background). A lead's record ([`Lead`]) says
//! its name, term, value and proclaims, its start (read right after
//! `campaign` returned), when `lost()` was seen to resolve, its lease's
//! last validity end (renewals move it on) and when its resignation or
//! drop began.
//!
//! An observer (a client of its own) runs `observe()` on every name for
//! the whole run, and records every leader it is told, and every vacancy
//! ([`Told`]). Campaigns, proclaims and resignations are recorded in the
//! history too (their errors and bounds judged as every call's); an
//! observer's `next()` only when it fails (it waits for a change).

use std::future::IntoFuture;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redlease::{Leadership, LostReason};
use tokio::sync::watch;

use super::{guarded, worker_seed, Client, Ran, Settings, MAX_CYCLES};
use crate::election_checker::{Campaigned, ElectionRun, Ended, Lead, Leader, Proclaimed, Told};
use crate::history::{Call, ErrorKind, NotCounted};

/// The elections workload's knobs ([`Settings::elections`]).
#[derive(Clone, Debug)]
pub struct Mix {
    /// Election names, numbered `0..names`.
    pub names: usize,
    /// The workers that campaign.
    pub campaigners: Vec<usize>,
    /// The workers that observe every name.
    pub observers: Vec<usize>,
    /// How long a lead lasts, at least and at most (from its start).
    pub min_lead: Duration,
    pub max_lead: Duration,
    /// Share of the leads that proclaim a new value (once or twice).
    pub proclaim_share: f64,
    /// Share of the leads dropped instead of resigned.
    pub drop_share: f64,
    /// The leader stops when `lost()` resolves, and its lead ends by its
    /// lease's validity; `false` in the negative control: it leads, by
    /// its own word, until its time is up, whatever the library says.
    pub heeds_lost: bool,
}

/// An election's name: `soak-election-{n}`.
pub fn election_name(name: usize) -> String {
    format!("soak-election-{name}")
}

/// Every lead, failed campaign and observation of a run; cheap to clone.
#[derive(Clone, Default)]
pub struct Journal(Arc<Mutex<Recorded>>);

#[derive(Default)]
struct Recorded {
    leads: Vec<Lead>,
    failed: Vec<(usize, String)>,
    campaigns: Vec<Campaigned>,
    told: Vec<Told>,
}

impl Journal {
    fn with<T>(&self, f: impl FnOnce(&mut Recorded) -> T) -> T {
        f(&mut self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }

    pub fn lead(&self, lead: Lead) {
        self.with(|r| r.leads.push(lead));
    }

    pub fn failed(&self, name: usize, value: String) {
        self.with(|r| r.failed.push((name, value)));
    }

    pub fn campaigned(&self, campaign: Campaigned) {
        self.with(|r| r.campaigns.push(campaign));
    }

    pub fn told(&self, told: Told) {
        self.with(|r| r.told.push(told));
    }

    /// Everything recorded, for the checker.
    pub fn run(
        &self,
        names: usize,
        observers: Vec<usize>,
        flagged_by: Option<&'static str>,
    ) -> ElectionRun {
        self.with(|r| {
            let mut leads = r.leads.clone();
            leads.sort_by_key(|l| (l.name, l.start, l.term));
            ElectionRun {
                names,
                leads,
                failed: r.failed.clone(),
                campaigns: r.campaigns.clone(),
                told: r.told.clone(),
                observers,
                flagged_by,
            }
        })
    }
}

/// How a lost lead's reason is counted.
pub fn lost_label(why: LostReason) -> &'static str {
    match why {
        LostReason::Refused => "refused",
        LostReason::Expired => "expired",
        LostReason::NodeErrors => "node errors",
        LostReason::Closed => "closed",
        _ => "other",
    }
}

impl Client {
    /// Campaigns for election `name` with `value`, waiting in turn up to
    /// `wait`: the `Leadership` and its start (right after the call
    /// returned), or `None` (recorded in the history either way).
    pub async fn campaign(
        &self,
        name: usize,
        value: &str,
        wait: Duration,
    ) -> Option<(Leadership, Duration)> {
        let election = self.locker.election(election_name(name));
        let invoke = Instant::now();
        let ran = guarded(election.campaign(value).wait(wait).into_future()).await;
        let mut op = self.op(name, None, Call::Campaign, invoke);
        op.bound = Some(self.lock_bound(wait) + 3 * self.node_timeout);
        match ran {
            Ran::Ok(lead) => {
                let start = op.complete;
                op.valid_until = Some(self.rec.at(lead.lease().valid_until()));
                op.token = Some(lead.term());
                self.rec.push(op);
                Some((lead, start))
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

    /// Proclaims `value` for the lead of election `name`; whether it
    /// returned `Ok`.
    pub async fn proclaim(&self, name: usize, lead: &mut Leadership, value: &str) -> bool {
        let invoke = Instant::now();
        let ran = guarded(lead.proclaim(value)).await;
        let mut op = self.op(name, None, Call::Proclaim, invoke);
        op.token = Some(lead.term());
        op.valid_until = Some(self.rec.at(lead.lease().valid_until()));
        let ok = matches!(ran, Ran::Ok(()));
        op.outcome = Self::failed(ran);
        self.rec.push(op);
        ok
    }

    /// Resigns the lead of election `name`: when the call began, and
    /// whether it returned `Ok`.
    pub async fn resign(&self, name: usize, lead: Leadership) -> (Duration, bool) {
        let term = lead.term();
        let valid_until = self.rec.at(lead.lease().valid_until());
        let invoke = Instant::now();
        let ran = guarded(lead.resign()).await;
        let mut op = self.op(name, None, Call::Resign, invoke);
        op.token = Some(term);
        op.valid_until = Some(valid_until);
        let ok = matches!(ran, Ran::Ok(()));
        op.outcome = Self::failed(ran);
        let began = op.invoke;
        self.rec.push(op);
        (began, ok)
    }

    /// An operator's `force_release` of election `name`: on how many
    /// nodes it deleted the lock, or the error's kind.
    pub async fn force_release(&self, name: usize) -> Result<usize, ErrorKind> {
        let invoke = Instant::now();
        let ran = guarded(self.locker.admin().force_release(&election_name(name))).await;
        let mut op = self.op(name, None, Call::ForceRelease, invoke);
        let result = match &ran {
            Ran::Ok(n) => Ok(*n),
            Ran::Err(e) => Err(ErrorKind::of(e)),
            Ran::Panicked(_) => Err(ErrorKind::Panic),
        };
        op.outcome = Self::failed(ran);
        self.rec.push(op);
        result
    }

    /// `election.leader()` of election `name`, asked once: who leads
    /// (`Some(None)`: nobody), or `None` when the call failed.
    pub async fn leader(&self, name: usize) -> Option<Option<Leader>> {
        let election = self.locker.election(election_name(name));
        let invoke = Instant::now();
        let ran = guarded(election.leader()).await;
        let mut op = self.op(name, None, Call::Leader, invoke);
        let leader = match &ran {
            Ran::Ok(leader) => Some(leader.as_ref().map(told_leader)),
            _ => None,
        };
        op.outcome = Self::failed(ran);
        self.rec.push(op);
        leader
    }
}

fn told_leader(l: &redlease::Leader) -> Leader {
    Leader {
        term: l.term,
        revision: l.revision,
        value: l.value.clone(),
    }
}

/// `lo + U(0, 1) x (hi - lo)`.
fn between(rng: &mut StdRng, lo: Duration, hi: Duration) -> Duration {
    lo + hi.saturating_sub(lo).mul_f64(rng.random::<f64>())
}

/// A campaigner: campaigns and leads until `deadline` (the lead in
/// progress finishes). A campaign waits up to the client's wait, less
/// near the deadline (a TTL at least), so the run drains soon after it.
pub async fn campaign(
    client: Client,
    settings: Arc<Settings>,
    seed: u64,
    deadline: Instant,
    journal: Journal,
) {
    let Some(mix) = settings.elections.clone() else {
        return;
    };
    let mut rng = StdRng::seed_from_u64(worker_seed(seed, client.worker));
    for n in 0..MAX_CYCLES {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        let name = rng.random_range(0..mix.names);
        let value = format!("w{}-e{name}-c{n}", client.worker);
        let wait = client
            .wait
            .min(deadline.saturating_duration_since(now).max(settings.ttl));
        let invoked = client.rec.now();
        let won = client.campaign(name, &value, wait).await;
        journal.campaigned(Campaigned {
            worker: client.worker,
            name,
            invoked,
            returned: won
                .as_ref()
                .map_or_else(|| client.rec.now(), |(_, start)| *start),
            won: won.is_some(),
        });
        let Some((leadership, start)) = won else {
            journal.failed(name, value);
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..=5))).await;
            continue;
        };
        lead(&client, leadership, name, start, &mix, &mut rng, &journal).await;
    }
}

/// Leads election `name` for a random time, proclaiming now and then,
/// watching `lost()` (where the mix heeds it); then resigns or drops it,
/// and records the lead.
pub async fn lead(
    client: &Client,
    mut leadership: Leadership,
    name: usize,
    start: Duration,
    mix: &Mix,
    rng: &mut StdRng,
    journal: &Journal,
) {
    let hold = between(rng, mix.min_lead, mix.max_lead);
    let began = client.rec.epoch() + start;
    let until = began + hold;
    let mut proclaim_at: Vec<Instant> = match rng.random_bool(mix.proclaim_share) {
        true => (0..rng.random_range(1..=2))
            .map(|_| began + hold.mul_f64(rng.random::<f64>()))
            .collect(),
        false => Vec::new(),
    };
    proclaim_at.sort();
    let mut proclaim_at = proclaim_at.into_iter();
    let mut record = Lead {
        worker: client.worker,
        name,
        term: leadership.term(),
        value: leadership.value(),
        start,
        ..Lead::default()
    };
    let lost = leadership.lost();
    tokio::pin!(lost);
    let mut revision = 1;
    let mut next_proclaim = proclaim_at.next();
    loop {
        let next = next_proclaim.map_or(until, |at| at.min(until));
        if mix.heeds_lost {
            tokio::select! {
                biased;
                why = &mut lost => {
                    record.lost = Some(client.rec.now());
                    record.lost_reason = Some(lost_label(why));
                    break;
                }
                () = tokio::time::sleep_until(next.into()) => {}
            }
        } else {
            tokio::time::sleep_until(next.into()).await;
        }
        if Instant::now() >= until {
            break;
        }
        next_proclaim = proclaim_at.next();
        let value = format!("{}-p{}", record.value, revision + 1);
        let at = client.rec.now();
        let ok = client.proclaim(name, &mut leadership, &value).await;
        record.proclaims.push(Proclaimed {
            revision: revision + 1,
            value,
            at,
            ok,
        });
        revision += u64::from(ok);
    }
    if mix.heeds_lost {
        record.valid_until = Some(client.rec.at(leadership.lease().valid_until()));
    }
    if rng.random_bool(mix.drop_share) {
        record.resign = Some(client.rec.now());
        record.ended = Ended::Dropped;
        drop(leadership);
    } else {
        let (began, ok) = client.resign(name, leadership).await;
        record.resign = Some(began);
        record.ended = if ok {
            Ended::Resigned
        } else {
            Ended::ResignFailed
        };
    }
    journal.lead(record);
}

/// An observer: `observe()` on each of `names` elections until `stop`
/// turns true, every leader and vacancy told recorded. A failed `next()`
/// is recorded in the history, and asked again 100 ms later.
pub async fn observe(client: Client, names: usize, journal: Journal, stop: watch::Receiver<bool>) {
    let client = &client;
    join_all((0..names).map(|name| {
        let (journal, mut stop) = (journal.clone(), stop.clone());
        async move {
            let election = client.locker.election(election_name(name));
            let mut observe = election.observe();
            loop {
                let invoke = Instant::now();
                let next = tokio::select! {
                    next = guarded(observe.next()) => next,
                    _ = stop.wait_for(|stop| *stop) => break,
                };
                match next {
                    Ran::Ok(leader) => journal.told(Told {
                        observer: client.worker,
                        name,
                        at: client.rec.now(),
                        leader: leader.as_ref().map(told_leader),
                    }),
                    failed => {
                        let mut op = client.op(name, None, Call::Observe, invoke);
                        op.outcome = Client::failed(failed);
                        client.rec.push(op);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        }
    }))
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_elections_workload_campaigns_and_observes_on_distinct_clients() {
        let settings = Settings::elections();
        let mix = settings.elections.clone().unwrap();
        assert_eq!(
            settings.workers,
            mix.campaigners.len() + mix.observers.len()
        );
        assert!(mix.campaigners.iter().all(|w| !mix.observers.contains(w)));
        // Some of each behind fault proxies, some direct.
        assert!(mix.campaigners.iter().any(|w| settings.proxied.contains(w)));
        assert!(mix
            .campaigners
            .iter()
            .any(|w| !settings.proxied.contains(w)));
        assert!(mix.observers.iter().any(|w| settings.proxied.contains(w)));
        assert!(mix.observers.iter().any(|w| !settings.proxied.contains(w)));
        // No patient client: a lead is kept alive.
        assert!(settings.patient.is_empty());
        assert!(mix.heeds_lost && mix.min_lead < mix.max_lead);
        assert!(mix.max_lead < settings.wait);
    }
}
