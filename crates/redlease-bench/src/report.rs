//! Turning measured outcomes into figures: the readable table and the
//! one-JSON-object-per-workload lines.

use std::collections::BTreeMap;

use crate::stats::LockMode;
use serde_json::{json, Map, Value};

use crate::commands::Served;
use crate::floor::CClient;
use crate::stats::{self, Cycle, Handoffs, Holders, Percentiles, Sharing};
use crate::workloads::{Outcome, Workload, MULTI_NAMES, PERMITS};

/// One client's figures for one workload.
#[derive(Debug)]
pub struct ClientRun {
    pub client: &'static str,
    pub ops: u64,
    pub elapsed_s: f64,
    pub cycles_per_s: f64,
    pub acquire: Option<Percentiles>,
    pub release: Option<Percentiles>,
    pub per_worker: Vec<u64>,
    /// CPU time of the whole bench process per cycle (client cost).
    pub client_cpu_us_per_cycle: f64,
    /// CPU time of all redis-server nodes per cycle, when they are ours.
    pub server_cpu_us_per_cycle: Option<f64>,
    /// Contended workload only.
    pub contention: Option<Contention>,
    /// Read-mostly workload only.
    pub read_write: Option<ReadWrite>,
    /// Semaphore workload only.
    pub permits: Option<Permits>,
    /// Multi workload only.
    pub multi: Option<Multi>,
}

/// What only a contended run has.
#[derive(Debug)]
pub struct Contention {
    /// Completed cycles minus the final counter: updates two holders raced on.
    pub lost_updates: i64,
    pub handoffs: Handoffs,
}

/// What only a read-mostly run has: its reads and writes apart.
#[derive(Debug)]
pub struct ReadWrite {
    pub reads: u64,
    pub writes: u64,
    pub reads_per_s: f64,
    pub writes_per_s: f64,
    /// Time in acquire (any waiting included) of the reads, of the writes.
    pub read_wait: Option<Percentiles>,
    pub write_wait: Option<Percentiles>,
    /// Writes minus the final counter: updates two writers raced on.
    pub lost_updates: i64,
    pub sharing: Sharing,
}

/// What only a semaphore run has. Its rate of permits is `cycles_per_s`:
/// each cycle takes one permit and gives it back.
#[derive(Debug)]
pub struct Permits {
    /// The semaphore's permits: the most holders it may admit at once.
    pub permits: u32,
    /// Time in acquire (any waiting included) of each permit.
    pub wait: Option<Percentiles>,
    pub holders: Holders,
}

/// What only a multi run has: how many names each cycle held, and what
/// the servers served per cycle.
#[derive(Debug)]
pub struct Multi {
    /// Names held together each cycle.
    pub names: usize,
    /// Per cycle and node of the quorum (a cluster's processes summed as
    /// its one node); `None` when some slice's counters could not be read.
    pub served: Option<ServedPerCycle>,
}

/// The servers' counters per cycle and node (see `commands`).
#[derive(Debug, PartialEq)]
pub struct ServedPerCycle {
    /// Read events on client sockets: with one worker, round trips.
    pub round_trips: f64,
    /// Commands executed, a script's inner calls included.
    pub commands: f64,
    /// The same by command name.
    pub calls: BTreeMap<String, f64>,
}

impl ServedPerCycle {
    /// `total` served over `cycles` cycles on `nodes` nodes.
    fn new(total: &Served, cycles: u64, nodes: usize) -> Option<ServedPerCycle> {
        let per = (cycles as f64) * (nodes as f64);
        if per <= 0.0 {
            return None;
        }
        Some(ServedPerCycle {
            round_trips: total.reads as f64 / per,
            commands: total.commands as f64 / per,
            calls: total
                .calls
                .iter()
                .map(|(name, &n)| (name.clone(), n as f64 / per))
                .collect(),
        })
    }

    /// "evalsha 2.00, set 4.00": the calls, most first.
    fn calls_text(&self) -> String {
        let mut calls: Vec<(&String, &f64)> = self.calls.iter().collect();
        calls.sort_by(|a, b| b.1.total_cmp(a.1).then(a.0.cmp(b.0)));
        calls
            .iter()
            .map(|(name, n)| format!("{name} {n:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Completed writes minus the final counter, summed over the slices.
fn lost_updates(slices: &[Outcome]) -> i64 {
    slices
        .iter()
        .map(|o| {
            let writes = o
                .cycles
                .iter()
                .filter(|c| c.mode == LockMode::Exclusive)
                .count();
            writes as i64 - o.final_counter.unwrap_or(0)
        })
        .sum()
}

impl ClientRun {
    /// Figures over all measured slices (rounds) of one client, on `nodes`
    /// nodes of the quorum.
    pub fn new(
        client: &'static str,
        workload: Workload,
        nodes: usize,
        slices: &[Outcome],
    ) -> ClientRun {
        let cycles: Vec<Cycle> = slices
            .iter()
            .flat_map(|o| o.cycles.iter().copied())
            .collect();
        let ops = cycles.len() as u64;
        let elapsed_s: f64 = slices.iter().map(|o| o.elapsed.as_secs_f64()).sum();
        let mut per_worker = Vec::new();
        for slice in slices {
            per_worker.resize(per_worker.len().max(slice.per_worker.len()), 0);
            for (total, n) in per_worker.iter_mut().zip(&slice.per_worker) {
                *total += n;
            }
        }
        let counted = slices.iter().all(|o| o.final_counter.is_some()) && !slices.is_empty();
        let contended = counted && workload == Workload::Contended;
        let read_mostly = counted && workload == Workload::ReadMostly;
        let semaphore = !slices.is_empty() && workload == Workload::Semaphore;
        let multi = !slices.is_empty() && workload == Workload::Multi;
        let rate = |n: u64| {
            if elapsed_s > 0.0 {
                n as f64 / elapsed_s
            } else {
                0.0
            }
        };
        let per_cycle = |total: f64| {
            if ops > 0 {
                total * 1e6 / ops as f64
            } else {
                0.0
            }
        };
        let client_cpu: f64 = slices.iter().map(|o| o.client_cpu.as_secs_f64()).sum();
        let server_cpu: Option<f64> = slices
            .iter()
            .map(|o| o.server_cpu.map(|d| d.as_secs_f64()))
            .sum();
        ClientRun {
            client,
            ops,
            elapsed_s,
            cycles_per_s: rate(ops),
            acquire: stats::acquire_latencies(&cycles),
            release: stats::release_latencies(&cycles),
            per_worker,
            client_cpu_us_per_cycle: per_cycle(client_cpu),
            server_cpu_us_per_cycle: server_cpu.map(per_cycle),
            contention: contended.then(|| Contention {
                lost_updates: lost_updates(slices),
                handoffs: stats::handoffs(slices.iter().map(|o| &o.cycles[..])),
            }),
            read_write: read_mostly.then(|| {
                let writes = cycles
                    .iter()
                    .filter(|c| c.mode == LockMode::Exclusive)
                    .count() as u64;
                let reads = ops - writes;
                ReadWrite {
                    reads,
                    writes,
                    reads_per_s: rate(reads),
                    writes_per_s: rate(writes),
                    read_wait: stats::acquire_latencies_in(&cycles, LockMode::Shared),
                    write_wait: stats::acquire_latencies_in(&cycles, LockMode::Exclusive),
                    lost_updates: lost_updates(slices),
                    sharing: stats::sharing(slices.iter().map(|o| &o.cycles[..])),
                }
            }),
            permits: semaphore.then(|| Permits {
                permits: PERMITS,
                wait: stats::acquire_latencies(&cycles),
                holders: stats::holders(slices.iter().map(|o| &o.cycles[..]), PERMITS),
            }),
            multi: multi.then(|| Multi {
                names: MULTI_NAMES,
                served: slices
                    .iter()
                    .map(|o| o.served.as_ref())
                    .collect::<Option<Vec<&Served>>>()
                    .and_then(|all| {
                        let mut total = Served::default();
                        for s in all {
                            total.reads += s.reads;
                            total.commands += s.commands;
                            for (name, n) in &s.calls {
                                *total.calls.entry(name.clone()).or_default() += n;
                            }
                        }
                        ServedPerCycle::new(&total, ops, nodes)
                    }),
            }),
        }
    }

    /// Why this run is a correctness failure, if it is one.
    pub fn violation(&self) -> Option<String> {
        if let Some(c) = &self.contention {
            if c.lost_updates != 0 || c.handoffs.overlaps != 0 {
                return Some(format!(
                    "{}: lost_updates = {} and {} overlapping holders over {} cycles: \
                     two workers held the lock at once",
                    self.client, c.lost_updates, c.handoffs.overlaps, self.ops
                ));
            }
        }
        if let Some(rw) = &self.read_write {
            if rw.lost_updates != 0 || rw.sharing.overlaps != 0 {
                return Some(format!(
                    "{}: lost_updates = {} and {} holds taken while a hold they exclude \
                     was held, over {} reads and {} writes: a writer held the lock \
                     together with another holder",
                    self.client, rw.lost_updates, rw.sharing.overlaps, rw.reads, rw.writes
                ));
            }
        }
        if let Some(p) = &self.permits {
            if p.holders.overlaps != 0 || p.holders.peak > u64::from(p.permits) {
                return Some(format!(
                    "{}: {} holders held a permit at once ({} permits taken while all {} \
                     were held), over {} cycles: the semaphore admitted more holders than \
                     its {} permits",
                    self.client, p.holders.peak, p.holders.overlaps, p.permits, self.ops, p.permits
                ));
            }
        }
        None
    }

    fn json_fields(&self, out: &mut Map<String, Value>) {
        out.insert("client".into(), json!(self.client));
        out.insert("ops".into(), json!(self.ops));
        out.insert("elapsed_s".into(), json!(round(self.elapsed_s, 3)));
        out.insert("cycles_per_s".into(), json!(round(self.cycles_per_s, 1)));
        put_percentiles(out, "acquire", self.acquire);
        put_percentiles(out, "release", self.release);
        out.insert(
            "client_cpu_us_per_cycle".into(),
            json!(round(self.client_cpu_us_per_cycle, 2)),
        );
        out.insert(
            "server_cpu_us_per_cycle".into(),
            json!(self.server_cpu_us_per_cycle.map(|v| round(v, 2))),
        );
        if let Some(c) = &self.contention {
            out.insert("lost_updates".into(), json!(c.lost_updates));
            out.insert("overlaps".into(), json!(c.handoffs.overlaps));
            put_percentiles(out, "handoff", c.handoffs.handoff);
            put_percentiles(out, "cross_handoff", c.handoffs.cross_handoff);
            out.insert(
                "same_worker_share".into(),
                json!(round(c.handoffs.same_worker_share, 4)),
            );
            put_percentiles(out, "wait", c.handoffs.wait);
        }
        if let Some(rw) = &self.read_write {
            out.insert("reads".into(), json!(rw.reads));
            out.insert("writes".into(), json!(rw.writes));
            out.insert("reads_per_s".into(), json!(round(rw.reads_per_s, 1)));
            out.insert("writes_per_s".into(), json!(round(rw.writes_per_s, 1)));
            put_percentiles(out, "read_wait", rw.read_wait);
            put_percentiles(out, "write_wait", rw.write_wait);
            out.insert("lost_updates".into(), json!(rw.lost_updates));
            out.insert("overlaps".into(), json!(rw.sharing.overlaps));
            out.insert("peak_readers".into(), json!(rw.sharing.peak_readers));
        }
        if let Some(p) = &self.permits {
            out.insert("permits".into(), json!(p.permits));
            out.insert("permits_per_s".into(), json!(round(self.cycles_per_s, 1)));
            put_percentiles(out, "permit_wait", p.wait);
            out.insert("overlaps".into(), json!(p.holders.overlaps));
            out.insert("peak_holders".into(), json!(p.holders.peak));
        }
        if let Some(m) = &self.multi {
            out.insert("names".into(), json!(m.names));
            let served = m.served.as_ref();
            out.insert(
                "round_trips_per_cycle_per_node".into(),
                json!(served.map(|s| round(s.round_trips, 3))),
            );
            out.insert(
                "commands_per_cycle_per_node".into(),
                json!(served.map(|s| round(s.commands, 3))),
            );
            out.insert(
                "calls_per_cycle_per_node".into(),
                served.map_or(Value::Null, |s| {
                    Value::Object(
                        s.calls
                            .iter()
                            .map(|(name, &n)| (name.clone(), json!(round(n, 3))))
                            .collect(),
                    )
                }),
            );
        }
        out.insert("per_worker".into(), json!(self.per_worker));
    }

    fn json(&self) -> Value {
        let mut out = Map::new();
        self.json_fields(&mut out);
        Value::Object(out)
    }
}

fn put_percentiles(out: &mut Map<String, Value>, name: &str, p: Option<Percentiles>) {
    let (p50, p99) = match p {
        Some(p) => (json!(round(p.p50_us, 1)), json!(round(p.p99_us, 1))),
        None => (Value::Null, Value::Null),
    };
    out.insert(format!("{name}_p50_us"), p50);
    out.insert(format!("{name}_p99_us"), p99);
}

fn round(x: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (x * scale).round() / scale
}

/// Everything measured for one workload on one node count.
#[derive(Debug)]
pub struct WorkloadReport {
    pub workload: Workload,
    pub nodes: usize,
    /// The one node is a Redis Cluster of this many primaries.
    pub cluster: Option<usize>,
    pub workers: usize,
    /// Measured seconds per client (all rounds).
    pub seconds: f64,
    /// Interleaved rounds the seconds were split into.
    pub rounds: u32,
    pub lib: ClientRun,
    /// Semaphore only: how many of the nodes hold each permit.
    pub permit_quorum: Option<usize>,
    /// The baselines; absent where they cannot run the workload
    /// (read-mostly, semaphore: they have no read-write lock, no
    /// semaphore).
    pub raw: Option<ClientRun>,
    /// `SET NX PX` and compare-and-delete: the floor.
    pub plain: Option<ClientRun>,
    /// Uncontended, single servers: plain's commands over blocking
    /// connections, on the calling thread (`floor.rs`).
    pub blocking: Option<ClientRun>,
    /// Uncontended, single servers: redis-benchmark's two round trips on
    /// the first node (`floor.rs`).
    pub c_client: Option<CClient>,
    pub rslock: Option<ClientRun>,
    /// Multi only: the library with one `lock` after another instead of
    /// `lock_all` (`lib`).
    pub nested: Option<ClientRun>,
    /// The library with fencing tokens on (`--compare fenced`).
    pub fenced: Option<ClientRun>,
    /// The library with the clock-jump guard off (`--compare unguarded`).
    pub unguarded: Option<ClientRun>,
    /// The library with the express connection on (`--compare express`).
    pub express: Option<ClientRun>,
}

impl WorkloadReport {
    /// The library's rate over the raw baseline's, when that ran.
    pub fn ratio_vs_raw(&self) -> Option<f64> {
        Some(ratio(
            self.lib.cycles_per_s,
            self.raw.as_ref()?.cycles_per_s,
        ))
    }

    /// What the clients ran on, for messages: "5 node(s)" or "a 3-primary
    /// cluster (1 node)".
    pub fn deployment(&self) -> String {
        match self.cluster {
            Some(k) => format!("a {k}-primary cluster ({} node)", self.nodes),
            None => format!("{} node(s)", self.nodes),
        }
    }

    /// The table's `nodes` cell: the count, and the cluster if it is one.
    fn nodes_cell(&self) -> String {
        match self.cluster {
            Some(k) => format!("{} (cluster of {k})", self.nodes),
            None => self.nodes.to_string(),
        }
    }

    /// The library's server CPU per cycle over the plain baseline's, when
    /// the servers are ours and the baseline ran.
    pub fn server_cpu_vs_plain(&self) -> Option<f64> {
        Some(ratio(
            self.lib.server_cpu_us_per_cycle?,
            self.plain.as_ref()?.server_cpu_us_per_cycle?,
        ))
    }

    pub fn runs(&self) -> impl Iterator<Item = &ClientRun> {
        [
            Some(&self.lib),
            self.raw.as_ref(),
            self.plain.as_ref(),
            self.blocking.as_ref(),
            self.rslock.as_ref(),
            self.nested.as_ref(),
            self.fenced.as_ref(),
            self.unguarded.as_ref(),
            self.express.as_ref(),
        ]
        .into_iter()
        .flatten()
    }

    /// The JSON line: the library's figures at the top level (the fields the
    /// issue asks for), the baselines and rslock in full under their names
    /// (left out, with the ratios to them, where they did not run).
    pub fn json(&self) -> Value {
        let mut out = Map::new();
        out.insert("workload".into(), json!(self.workload.name()));
        out.insert("nodes".into(), json!(self.nodes));
        if let Some(k) = self.cluster {
            out.insert("cluster_primaries".into(), json!(k));
        }
        out.insert("workers".into(), json!(self.workers));
        out.insert("seconds".into(), json!(self.seconds));
        out.insert("rounds".into(), json!(self.rounds));
        if let Some(q) = self.permit_quorum {
            out.insert("permit_quorum".into(), json!(q));
        }
        self.lib.json_fields(&mut out);
        if let Some(raw) = &self.raw {
            out.insert("raw_cycles_per_s".into(), json!(round(raw.cycles_per_s, 1)));
            out.insert(
                "ratio_vs_raw".into(),
                json!(round(ratio(self.lib.cycles_per_s, raw.cycles_per_s), 3)),
            );
        }
        if let Some(plain) = &self.plain {
            out.insert(
                "ratio_vs_plain".into(),
                json!(round(ratio(self.lib.cycles_per_s, plain.cycles_per_s), 3)),
            );
            out.insert(
                "server_cpu_vs_plain".into(),
                json!(self.server_cpu_vs_plain().map(|x| round(x, 3))),
            );
            out.insert(
                "client_cpu_vs_plain".into(),
                json!(round(
                    ratio(
                        self.lib.client_cpu_us_per_cycle,
                        plain.client_cpu_us_per_cycle
                    ),
                    3
                )),
            );
        }
        if let Some(rs) = &self.rslock {
            out.insert(
                "rslock_cycles_per_s".into(),
                json!(round(rs.cycles_per_s, 1)),
            );
            out.insert(
                "ratio_vs_rslock".into(),
                json!(round(ratio(self.lib.cycles_per_s, rs.cycles_per_s), 3)),
            );
        }
        if let Some(nested) = &self.nested {
            out.insert(
                "nested_cycles_per_s".into(),
                json!(round(nested.cycles_per_s, 1)),
            );
            out.insert(
                "ratio_vs_nested".into(),
                json!(round(ratio(self.lib.cycles_per_s, nested.cycles_per_s), 3)),
            );
        }
        if let Some(raw) = &self.raw {
            out.insert("raw".into(), raw.json());
        }
        if let Some(plain) = &self.plain {
            out.insert("plain".into(), plain.json());
        }
        if let Some(rs) = &self.rslock {
            out.insert("rslock".into(), rs.json());
        }
        if let Some(nested) = &self.nested {
            out.insert("nested".into(), nested.json());
        }
        if let Some(f) = &self.fenced {
            out.insert("fenced".into(), f.json());
        }
        if let Some(u) = &self.unguarded {
            out.insert("unguarded".into(), u.json());
        }
        if let Some(e) = &self.express {
            out.insert(
                "express_ratio".into(),
                json!(round(ratio(e.cycles_per_s, self.lib.cycles_per_s), 3)),
            );
            out.insert("express".into(), e.json());
        }
        if let Some(b) = &self.blocking {
            out.insert(
                "ratio_vs_blocking".into(),
                json!(round(ratio(self.lib.cycles_per_s, b.cycles_per_s), 3)),
            );
            out.insert("blocking".into(), b.json());
        }
        if let Some(c) = &self.c_client {
            out.insert(
                "ratio_vs_c_client".into(),
                json!(round(ratio(self.lib.cycles_per_s, c.cycles_per_s()), 3)),
            );
            out.insert("c_client".into(), c.json());
        }
        Value::Object(out)
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        0.0
    }
}

/// The readable tables: throughput and latency for every run, then the
/// hand-off details of the contended runs, the reads and writes of the
/// read-mostly runs, the permits of the semaphore runs and what the
/// servers served per cycle of the multi runs.
pub fn table(reports: &[WorkloadReport]) -> String {
    let mut main = vec![row(&[
        "workload",
        "nodes",
        "workers",
        "client",
        "cycles/s",
        "vs raw",
        "acq p50",
        "acq p99",
        "rel p50",
        "rel p99",
        "cli CPU",
        "srv CPU",
        "srv÷plain",
    ])];
    for r in reports {
        for run in r.runs() {
            main.push(vec![
                r.workload.name().into(),
                r.nodes_cell(),
                r.workers.to_string(),
                run.client.into(),
                format!("{:.0}", run.cycles_per_s),
                r.raw.as_ref().map_or_else(
                    || "-".into(),
                    |raw| format!("{:.3}", ratio(run.cycles_per_s, raw.cycles_per_s)),
                ),
                us(run.acquire.map(|p| p.p50_us)),
                us(run.acquire.map(|p| p.p99_us)),
                us(run.release.map(|p| p.p50_us)),
                us(run.release.map(|p| p.p99_us)),
                format!("{:.1}", run.client_cpu_us_per_cycle),
                run.server_cpu_us_per_cycle
                    .map_or_else(|| "-".into(), |v| format!("{v:.1}")),
                run.server_cpu_us_per_cycle
                    .zip(r.plain.as_ref().and_then(|p| p.server_cpu_us_per_cycle))
                    .map_or_else(|| "-".into(), |(v, p)| format!("{:.2}", ratio(v, p))),
            ]);
        }
    }
    let mut out = String::from(
        "latencies in microseconds; vs raw = cycles/s / raw cycles/s; \
         cli/srv CPU = CPU microseconds per cycle of the bench process / of all redis-servers \
         (every process of a cluster); srv÷plain = srv CPU / plain's srv CPU\n",
    );
    out.push_str(&render(&main));
    for r in reports {
        if let Some(c) = &r.c_client {
            out.push_str(&format!(
                "{}, {}: the C client's floor (redis-benchmark -c 1 on the first node): \
                 SET NX PX {:.0}/s, EVALSHA {:.0}/s, two round trips {:.0} cycles/s; \
                 redlease x{:.3}\n",
                r.workload.name(),
                r.deployment(),
                c.set_per_s,
                c.evalsha_per_s,
                c.cycles_per_s(),
                ratio(r.lib.cycles_per_s, c.cycles_per_s()),
            ));
        }
    }

    let mut contended = vec![row(&[
        "contended",
        "nodes",
        "workers",
        "client",
        "lost",
        "handoff p50",
        "handoff p99",
        "cross p50",
        "cross p99",
        "same-worker",
        "wait p50",
        "wait p99",
        "per worker",
    ])];
    for r in reports {
        for run in r.runs() {
            let Some(c) = &run.contention else { continue };
            let h = &c.handoffs;
            contended.push(vec![
                String::new(),
                r.nodes_cell(),
                r.workers.to_string(),
                run.client.into(),
                c.lost_updates.to_string(),
                us(h.handoff.map(|p| p.p50_us)),
                us(h.handoff.map(|p| p.p99_us)),
                us(h.cross_handoff.map(|p| p.p50_us)),
                us(h.cross_handoff.map(|p| p.p99_us)),
                format!("{:.1}%", h.same_worker_share * 100.0),
                us(h.wait.map(|p| p.p50_us)),
                us(h.wait.map(|p| p.p99_us)),
                spread(&run.per_worker),
            ]);
        }
    }
    if contended.len() > 1 {
        out.push('\n');
        out.push_str(&render(&contended));
    }

    let mut read_mostly = vec![row(&[
        "read-mostly",
        "nodes",
        "workers",
        "client",
        "reads/s",
        "writes/s",
        "read wait p50",
        "read wait p99",
        "write wait p50",
        "write wait p99",
        "peak readers",
        "lost",
        "per worker",
    ])];
    for r in reports {
        for run in r.runs() {
            let Some(rw) = &run.read_write else { continue };
            read_mostly.push(vec![
                String::new(),
                r.nodes_cell(),
                r.workers.to_string(),
                run.client.into(),
                format!("{:.0}", rw.reads_per_s),
                format!("{:.0}", rw.writes_per_s),
                us(rw.read_wait.map(|p| p.p50_us)),
                us(rw.read_wait.map(|p| p.p99_us)),
                us(rw.write_wait.map(|p| p.p50_us)),
                us(rw.write_wait.map(|p| p.p99_us)),
                rw.sharing.peak_readers.to_string(),
                rw.lost_updates.to_string(),
                spread(&run.per_worker),
            ]);
        }
    }
    if read_mostly.len() > 1 {
        out.push('\n');
        out.push_str(&render(&read_mostly));
    }

    let mut semaphore = vec![row(&[
        "semaphore",
        "nodes",
        "workers",
        "client",
        "permits",
        "quorum",
        "permits/s",
        "wait p50",
        "wait p99",
        "peak holders",
        "per worker",
    ])];
    for r in reports {
        for run in r.runs() {
            let Some(p) = &run.permits else { continue };
            semaphore.push(vec![
                String::new(),
                r.nodes_cell(),
                r.workers.to_string(),
                run.client.into(),
                p.permits.to_string(),
                r.permit_quorum
                    .map_or_else(|| "-".into(), |q| format!("{q} of {}", r.nodes)),
                format!("{:.0}", run.cycles_per_s),
                us(p.wait.map(|p| p.p50_us)),
                us(p.wait.map(|p| p.p99_us)),
                p.holders.peak.to_string(),
                spread(&run.per_worker),
            ]);
        }
    }
    if semaphore.len() > 1 {
        out.push('\n');
        out.push_str(&render(&semaphore));
    }

    let mut multi = vec![row(&[
        "multi",
        "nodes",
        "names",
        "client",
        "takes",
        "cycles/s",
        "vs nested",
        "round trips/node",
        "commands/node",
        "calls per cycle and node",
    ])];
    for r in reports {
        for run in r.runs() {
            let Some(m) = &run.multi else { continue };
            let served = m.served.as_ref();
            multi.push(vec![
                String::new(),
                r.nodes_cell(),
                m.names.to_string(),
                run.client.into(),
                if run.client == "nested" {
                    format!("{} x lock", m.names)
                } else {
                    "lock_all".into()
                },
                format!("{:.0}", run.cycles_per_s),
                r.nested.as_ref().map_or_else(
                    || "-".into(),
                    |n| format!("{:.3}", ratio(run.cycles_per_s, n.cycles_per_s)),
                ),
                served.map_or_else(|| "-".into(), |s| format!("{:.2}", s.round_trips)),
                served.map_or_else(|| "-".into(), |s| format!("{:.2}", s.commands)),
                served.map_or_else(|| "-".into(), ServedPerCycle::calls_text),
            ]);
        }
    }
    if multi.len() > 1 {
        out.push_str(
            "\nmulti: per cycle and node of the quorum, from the servers' INFO: round trips = \
             read events on client sockets, commands = commands executed (a script's own \
             calls included)\n",
        );
        out.push_str(&render(&multi));
    }
    out
}

fn row(cells: &[&str]) -> Vec<String> {
    cells.iter().map(|c| c.to_string()).collect()
}

fn us(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.0}"))
}

/// "min..max" of the per-worker cycle counts.
fn spread(per_worker: &[u64]) -> String {
    match (per_worker.iter().min(), per_worker.iter().max()) {
        (Some(lo), Some(hi)) => format!("{lo}..{hi}"),
        _ => "-".into(),
    }
}

/// Left-aligns the first and fourth column (names), right-aligns numbers.
fn render(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|i| {
            rows.iter()
                .map(|r| r.get(i).map_or(0, |c| c.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if i == 0 || i == 3 {
                    format!("{c:<w$}", w = widths[i])
                } else {
                    format!("{c:>w$}", w = widths[i])
                }
            })
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// Where the figures stand against the goals (informational: no
/// figure decides the exit code).
pub fn targets(reports: &[WorkloadReport]) -> Vec<String> {
    let mut lines = vec!["targets (goals, not asserts):".to_string()];
    let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
    // The node-count targets are about independent servers, not a cluster.
    let find = |w: Workload, n: usize| {
        reports
            .iter()
            .find(|r| r.workload == w && r.nodes == n && r.cluster.is_none())
    };
    if let Some(x) = find(Workload::Uncontended, 1).and_then(WorkloadReport::ratio_vs_raw) {
        lines.push(format!(
            "  uncontended, 1 node: >= 0.97 x raw: {x:.3} ({})",
            verdict(x >= 0.97)
        ));
    }
    if let (Some(one), Some(five)) = (
        find(Workload::Uncontended, 1),
        find(Workload::Uncontended, 5),
    ) {
        let x = ratio(five.lib.cycles_per_s, one.lib.cycles_per_s);
        lines.push(format!(
            "  uncontended, 5 nodes: >= 0.8 x our 1-node rate: {x:.3} ({}; measured in separate \
             node sets, so not interleaved)",
            verdict(x >= 0.8)
        ));
    }
    for r in reports
        .iter()
        .filter(|r| r.workload == Workload::Independent)
    {
        let Some(x) = r.ratio_vs_raw() else { continue };
        lines.push(format!(
            "  independent, {}, {} workers: >= 0.8 x raw: {x:.3} ({})",
            r.deployment(),
            r.workers,
            verdict(x >= 0.8)
        ));
    }
    for r in reports
        .iter()
        .filter(|r| r.workload == Workload::Independent)
    {
        if let Some(x) = r.server_cpu_vs_plain() {
            lines.push(format!(
                "  independent, {}: Redis CPU per cycle <= 1.1 x plain's: {x:.3} ({})",
                r.deployment(),
                verdict(x <= 1.1)
            ));
        }
    }
    for r in reports.iter().filter(|r| r.workload == Workload::Contended) {
        if let Some(h) = r.lib.contention.as_ref().map(|c| &c.handoffs) {
            let share = h.same_worker_share;
            let p99_ms = h.wait.map_or(f64::INFINITY, |p| p.p99_us / 1000.0);
            lines.push(format!(
                "  contended, {}: fair (same-worker share <= 0.05, wait p99 <= 10 ms): \
                 {share:.3}, {p99_ms:.1} ms ({})",
                r.deployment(),
                verdict(share <= 0.05 && p99_ms <= 10.0)
            ));
        }
    }
    for r in reports {
        if let Some(rs) = &r.rslock {
            let x = ratio(r.lib.cycles_per_s, rs.cycles_per_s);
            lines.push(format!(
                "  {}, {}: at least rslock's rate: {x:.3} x ({})",
                r.workload,
                r.deployment(),
                verdict(x >= 1.0)
            ));
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    fn contended_slice(cycles: usize, counter: i64) -> Outcome {
        let t0 = Instant::now();
        let us = Duration::from_micros(1);
        let cycles = (0..cycles as u32)
            .map(|i| Cycle {
                worker: i % 2,
                mode: LockMode::Exclusive,
                acquire_start: t0 + i * 10 * us,
                acquire_returned: t0 + (i * 10 + 1) * us,
                release_started: t0 + (i * 10 + 5) * us,
                release_returned: t0 + (i * 10 + 6) * us,
            })
            .collect();
        Outcome {
            cycles,
            elapsed: Duration::from_millis(1),
            per_worker: vec![1, 2],
            final_counter: Some(counter),
            client_cpu: Duration::from_micros(50),
            server_cpu: None,
            served: None,
        }
    }

    #[test]
    fn lost_updates_sum_over_rounds_and_fail_the_run() {
        let ok = ClientRun::new(
            "x",
            Workload::Contended,
            1,
            &[contended_slice(4, 4), contended_slice(3, 3)],
        );
        assert_eq!(ok.ops, 7);
        assert_eq!(ok.per_worker, vec![2, 4]);
        assert_eq!(ok.contention.as_ref().unwrap().lost_updates, 0);
        assert_eq!(ok.violation(), None);

        let lost = ClientRun::new(
            "x",
            Workload::Contended,
            1,
            &[contended_slice(4, 4), contended_slice(3, 2)],
        );
        assert_eq!(lost.contention.as_ref().unwrap().lost_updates, 1);
        assert!(lost.violation().unwrap().contains("lost_updates = 1"));
    }

    #[test]
    fn per_cycle_cpu_and_rate_come_from_all_rounds() {
        let run = ClientRun::new(
            "x",
            Workload::Contended,
            1,
            &[contended_slice(5, 5), contended_slice(5, 5)],
        );
        // 10 cycles in 2 ms; 100 us of CPU over 10 cycles.
        assert!((run.cycles_per_s - 5_000.0).abs() < 1e-6);
        assert!((run.client_cpu_us_per_cycle - 10.0).abs() < 1e-6);
        assert_eq!(run.server_cpu_us_per_cycle, None);
    }

    /// A read-mostly slice: `reads` readers all holding from 10 to 50 us,
    /// then writers one after another; `writer_at` moves the first writer's
    /// acquire (a value below 50 puts it among the readers).
    fn read_mostly_slice(reads: u32, writes: u32, counter: i64, writer_at: u32) -> Outcome {
        let t0 = Instant::now();
        let us = Duration::from_micros(1);
        let mut cycles: Vec<Cycle> = (0..reads)
            .map(|i| Cycle {
                worker: i,
                mode: LockMode::Shared,
                acquire_start: t0,
                acquire_returned: t0 + 10 * us,
                release_started: t0 + 50 * us,
                release_returned: t0 + 55 * us,
            })
            .collect();
        cycles.extend((0..writes).map(|i| {
            let got = if i == 0 { writer_at } else { 100 + i * 10 };
            Cycle {
                worker: reads + i,
                mode: LockMode::Exclusive,
                acquire_start: t0,
                acquire_returned: t0 + got * us,
                release_started: t0 + (got + 5) * us,
                release_returned: t0 + (got + 6) * us,
            }
        }));
        Outcome {
            cycles,
            elapsed: Duration::from_millis(1),
            per_worker: vec![1; (reads + writes) as usize],
            final_counter: Some(counter),
            client_cpu: Duration::from_micros(50),
            server_cpu: None,
            served: None,
        }
    }

    #[test]
    fn read_mostly_splits_reads_and_writes_and_fails_on_a_writer_among_readers() {
        // 3 readers together, then 2 writers; the counter counts writes only.
        let ok = ClientRun::new(
            "x",
            Workload::ReadMostly,
            1,
            &[read_mostly_slice(3, 2, 2, 60)],
        );
        assert!(ok.contention.is_none());
        let rw = ok.read_write.as_ref().unwrap();
        assert_eq!((rw.reads, rw.writes, rw.lost_updates), (3, 2, 0));
        // 5 cycles in 1 ms.
        assert!((rw.reads_per_s - 3_000.0).abs() < 1e-6);
        assert!((rw.writes_per_s - 2_000.0).abs() < 1e-6);
        assert_eq!(rw.sharing.peak_readers, 3);
        assert_eq!(rw.read_wait.unwrap().count, 3);
        assert!((rw.read_wait.unwrap().p50_us - 10.0).abs() < 0.1);
        assert!((rw.write_wait.unwrap().p50_us - 60.0).abs() < 0.1);
        assert_eq!(ok.violation(), None);
        let json = ok.json();
        assert_eq!(json["reads"], 3);
        assert_eq!(json["overlaps"], 0);
        assert!(json.get("handoff_p50_us").is_none());

        // The first writer took the lock at 40, while the readers held it.
        let overlap = ClientRun::new(
            "x",
            Workload::ReadMostly,
            1,
            &[read_mostly_slice(3, 2, 2, 40)],
        );
        assert_eq!(overlap.read_write.as_ref().unwrap().sharing.overlaps, 1);
        assert!(overlap.violation().unwrap().contains("1 holds taken"));
        // A write lost, counted against writes (not all cycles).
        let lost = ClientRun::new(
            "x",
            Workload::ReadMostly,
            1,
            &[read_mostly_slice(3, 2, 1, 60)],
        );
        assert_eq!(lost.read_write.as_ref().unwrap().lost_updates, 1);
        assert!(lost.violation().unwrap().contains("lost_updates = 1"));
    }

    /// A semaphore slice: `together` holders taking their permits at 10,
    /// 11, ... us and all releasing at 50, then one more from 60 to 70;
    /// the counter, incremented and decremented by each, back at 0.
    fn semaphore_slice(together: u32) -> Outcome {
        let t0 = Instant::now();
        let us = Duration::from_micros(1);
        let permit = |worker: u32, got: u32, rel: u32| Cycle {
            worker,
            mode: LockMode::Permit,
            acquire_start: t0,
            acquire_returned: t0 + got * us,
            release_started: t0 + rel * us,
            release_returned: t0 + (rel + 5) * us,
        };
        let mut cycles: Vec<Cycle> = (0..together).map(|i| permit(i, 10 + i, 50)).collect();
        cycles.push(permit(0, 60, 70));
        Outcome {
            cycles,
            elapsed: Duration::from_millis(1),
            per_worker: vec![1; together as usize],
            final_counter: Some(0),
            client_cpu: Duration::from_micros(50),
            server_cpu: None,
            served: None,
        }
    }

    #[test]
    fn semaphore_reports_its_peak_and_fails_on_a_holder_too_many() {
        // PERMITS holders at once: the most it may admit.
        let full = ClientRun::new(
            "x",
            Workload::Semaphore,
            1,
            &[semaphore_slice(PERMITS), semaphore_slice(PERMITS)],
        );
        assert!(full.contention.is_none() && full.read_write.is_none());
        let p = full.permits.as_ref().unwrap();
        assert_eq!(p.permits, PERMITS);
        assert_eq!(p.holders.peak, u64::from(PERMITS));
        assert_eq!(p.holders.overlaps, 0);
        // (PERMITS + 1) * 2 cycles in 2 ms.
        let rate = f64::from(PERMITS + 1) * 1_000.0;
        assert!((full.cycles_per_s - rate).abs() < 1e-6);
        assert_eq!(p.wait.unwrap().count, u64::from(PERMITS + 1) * 2);
        assert!((p.wait.unwrap().p99_us - 60.0).abs() < 0.1);
        assert_eq!(full.violation(), None);
        let json = full.json();
        assert_eq!(json["permits"], PERMITS);
        assert_eq!(json["peak_holders"], PERMITS);
        assert_eq!(json["permits_per_s"], rate);
        assert!(json.get("lost_updates").is_none());

        // One holder too many in the second round: the run fails.
        let over = ClientRun::new(
            "x",
            Workload::Semaphore,
            1,
            &[semaphore_slice(PERMITS), semaphore_slice(PERMITS + 1)],
        );
        let p = over.permits.as_ref().unwrap();
        assert_eq!(p.holders.peak, u64::from(PERMITS + 1));
        assert_eq!(p.holders.overlaps, 1);
        let why = over.violation().unwrap();
        assert!(why.contains(&format!("{} holders", PERMITS + 1)), "{why}");
    }

    /// A multi slice: `cycles` cycles, with what the servers served.
    fn multi_slice(cycles: usize, served: Option<Served>) -> Outcome {
        Outcome {
            served,
            ..contended_slice(cycles, 0)
        }
    }

    fn served(reads: u64, commands: u64, evalsha: u64) -> Served {
        Served {
            reads,
            commands,
            calls: BTreeMap::from([("evalsha".to_string(), evalsha)]),
        }
    }

    #[test]
    fn multi_divides_what_the_servers_served_by_cycles_and_nodes() {
        // 10 cycles on 5 nodes: 100 reads, 950 commands, 100 EVALSHA.
        let run = ClientRun::new(
            "redlease",
            Workload::Multi,
            5,
            &[
                multi_slice(4, Some(served(40, 380, 40))),
                multi_slice(6, Some(served(60, 570, 60))),
            ],
        );
        assert!(run.contention.is_none() && run.permits.is_none());
        let m = run.multi.as_ref().unwrap();
        assert_eq!(m.names, MULTI_NAMES);
        let s = m.served.as_ref().unwrap();
        assert_eq!(
            *s,
            ServedPerCycle {
                round_trips: 2.0,
                commands: 19.0,
                calls: BTreeMap::from([("evalsha".to_string(), 2.0)]),
            }
        );
        assert_eq!(s.calls_text(), "evalsha 2.00");
        assert_eq!(run.violation(), None);
        let json = run.json();
        assert_eq!(json["names"], MULTI_NAMES);
        assert_eq!(json["round_trips_per_cycle_per_node"], 2.0);
        assert_eq!(json["commands_per_cycle_per_node"], 19.0);
        assert_eq!(json["calls_per_cycle_per_node"]["evalsha"], 2.0);

        // One slice whose counters could not be read: no figure at all,
        // rather than one over the other slices' cycles.
        let partial = ClientRun::new(
            "redlease",
            Workload::Multi,
            1,
            &[multi_slice(4, Some(served(8, 76, 8))), multi_slice(6, None)],
        );
        assert_eq!(partial.multi.as_ref().unwrap().served, None);
        assert!(partial.json()["round_trips_per_cycle_per_node"].is_null());
        // Other workloads carry no multi figures.
        let other = ClientRun::new(
            "x",
            Workload::Uncontended,
            1,
            &[multi_slice(4, Some(served(8, 76, 8)))],
        );
        assert!(other.multi.is_none());
        assert!(other.json().get("names").is_none());
    }
}
