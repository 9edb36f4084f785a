//! `redlease._redlease`: the Rust library behind the Python package.
//!
//! Every call that talks to the servers starts the library's own future
//! on a Tokio runtime this module keeps, and returns a [`Pending`] at
//! once. The Python package (python/redlease) waits for it in one of two
//! ways: a thread calls [`Pending::wait`] in short slices with the GIL
//! released, so Ctrl-C lands between two slices; an asyncio task asks to
//! be told ([`Pending::on_done`], through `loop.call_soon_threadsafe`).
//! Either one cancels it when interrupted or cancelled, and a cancelled
//! future is dropped, which the library makes safe: a wait leaves its
//! queue, an attempt in flight is undone in the background, and a lease
//! granted but never handed over is given back. Nothing here blocks with
//! the GIL held.
//!
//! Errors come out as `RawError(kind, message)`; the package raises its
//! own exception class for each kind (python/redlease/_errors.py).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

mod log;

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyRuntimeError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use redlease::{Error, LockStatus, RetryPolicy, Verdict};

create_exception!(
    _redlease,
    RawError,
    PyException,
    "An error of the library: (kind, message)."
);

/// The runtime every call runs on, and the process that made it: after a
/// `fork` its threads are gone, and a child must say so, never hang.
struct Runtime {
    pid: u32,
    tokio: tokio::runtime::Runtime,
}

fn runtime() -> PyResult<&'static tokio::runtime::Runtime> {
    static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();
    let made = RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("redlease")
            .enable_all()
            .build()
            .map(|tokio| Runtime {
                pid: std::process::id(),
                tokio,
            })
            .map_err(|e| e.to_string())
    });
    match made {
        Ok(rt) if rt.pid == std::process::id() => Ok(&rt.tokio),
        Ok(_) => Err(raw(
            "forked",
            "redlease was used in this process's parent before fork(): its threads did not \
             follow into the child; make the Locker in the child (or fork before using redlease)",
        )),
        Err(e) => Err(PyRuntimeError::new_err(format!(
            "redlease could not start its runtime: {e}"
        ))),
    }
}

/// Set at the interpreter's exit (the package registers [`shutdown`] with
/// `atexit`): from then on no thread of ours calls into Python, which is
/// being finalized.
static CLOSING: AtomicBool = AtomicBool::new(false);

/// Stops every callback into Python: called at the interpreter's exit.
#[pyfunction]
fn shutdown() {
    CLOSING.store(true, Ordering::SeqCst);
}

/// Whether the interpreter is exiting.
fn closing() -> bool {
    CLOSING.load(Ordering::SeqCst)
}

/// Calls `callback(args)` with the GIL, unless the interpreter is exiting;
/// an error it raises is reported as unraisable.
fn call_back<A>(callback: &Py<PyAny>, args: A)
where
    A: for<'py> pyo3::call::PyCallArgs<'py>,
{
    if closing() {
        return;
    }
    Python::attach(|py| {
        if let Err(e) = callback.call1(py, args) {
            e.write_unraisable(py, None);
        }
    });
}

fn raw(kind: &str, message: impl Into<String>) -> PyErr {
    RawError::new_err((kind.to_string(), message.into()))
}

/// The library's error as a `RawError`, its kind named for the package.
fn error(e: &Error) -> PyErr {
    let kind = match e {
        Error::InvalidInput { .. } => "invalid_input",
        Error::Taken { .. } => "taken",
        Error::NoQuorum { .. } => "no_quorum",
        Error::ValidityExhausted { .. } => "validity_exhausted",
        Error::NotHeld { .. } => "not_held",
        Error::Lost { .. } => "lost",
        Error::Closed => "closed",
        Error::SameServer { .. } => "same_server",
        Error::WaitTimeout { .. } => "wait_timeout",
        Error::PermitsDiffer { .. } => "permits_differ",
        Error::Forked { .. } => "forked",
        _ => "other",
    };
    raw(kind, e.to_string())
}

fn seconds(what: &str, s: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(s).map_err(|_| {
        raw(
            "invalid_input",
            format!("{what}: {s} is not a number of seconds (0 or more)"),
        )
    })
}

/// What a finished call gives back, turned into a Python object when taken.
type Outcome = Box<dyn FnOnce(Python<'_>) -> PyResult<Py<PyAny>> + Send>;

/// A call on its way: done once its future ended, with its outcome.
#[pyclass(frozen)]
struct Pending {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    done: Condvar,
}

#[derive(Default)]
struct State {
    outcome: Option<Result<Outcome, PyErr>>,
    finished: bool,
    taken: bool,
    callback: Option<Py<PyAny>>,
    abort: Option<tokio::task::AbortHandle>,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Starts `work` on the runtime; its result is turned into Python by
/// `make` when taken.
fn start<T, F, M>(work: F, make: M) -> PyResult<Pending>
where
    T: Send + 'static,
    F: std::future::Future<Output = Result<T, Error>> + Send + 'static,
    M: FnOnce(Python<'_>, T) -> PyResult<Py<PyAny>> + Send + 'static,
{
    let rt = runtime()?;
    let shared = Arc::new(Shared {
        state: Mutex::new(State::default()),
        done: Condvar::new(),
    });
    let ours = shared.clone();
    let task = rt.spawn(async move {
        let outcome: Result<Outcome, PyErr> = match work.await {
            Ok(value) => Ok(Box::new(move |py: Python<'_>| make(py, value))),
            Err(e) => Err(error(&e)),
        };
        let callback = {
            let mut state = ours.state();
            state.outcome = Some(outcome);
            state.finished = true;
            ours.done.notify_all();
            state.callback.take()
        };
        if let Some(callback) = callback {
            call_back(&callback, ());
        }
    });
    shared.state().abort = Some(task.abort_handle());
    Ok(Pending { shared })
}

#[pymethods]
impl Pending {
    /// Waits up to `timeout` seconds (with the GIL released) for the call
    /// to end; whether it has.
    fn wait(&self, py: Python<'_>, timeout: f64) -> PyResult<bool> {
        let timeout = seconds("timeout", timeout)?;
        let shared = self.shared.clone();
        Ok(py.detach(move || {
            let state = shared.state();
            let (state, _) = shared
                .done
                .wait_timeout_while(state, timeout, |s| !s.finished)
                .unwrap_or_else(|p| p.into_inner());
            state.finished
        }))
    }

    /// Whether the call has ended.
    fn done(&self) -> bool {
        self.shared.state().finished
    }

    /// Calls `callback()` (from another thread, with the GIL) once the call
    /// has ended; at once if it has.
    fn on_done(&self, py: Python<'_>, callback: Py<PyAny>) -> PyResult<()> {
        let now = {
            let mut state = self.shared.state();
            if state.finished {
                Some(callback)
            } else {
                state.callback = Some(callback);
                None
            }
        };
        if let Some(callback) = now {
            callback.call0(py)?;
        }
        Ok(())
    }

    /// The outcome of a call that has ended: its value, or its error
    /// raised. Taken once.
    fn result(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let outcome = {
            let mut state = self.shared.state();
            if !state.finished {
                return Err(PyRuntimeError::new_err("the call has not ended"));
            }
            if state.taken {
                return Err(PyRuntimeError::new_err("the outcome was taken already"));
            }
            state.taken = true;
            state.outcome.take()
        };
        match outcome {
            Some(Ok(make)) => make(py),
            Some(Err(e)) => Err(e),
            None => Err(PyRuntimeError::new_err("the call was cancelled")),
        }
    }

    /// Stops the call: a wait leaves its queue, an attempt in flight is
    /// undone, and what it got (a lease) is given back. Nothing once its
    /// outcome was taken.
    fn cancel(&self) {
        let (abort, outcome) = {
            let mut state = self.shared.state();
            let outcome = match state.taken {
                true => None,
                false => {
                    state.taken = true;
                    state.outcome.take()
                }
            };
            (state.abort.take(), outcome)
        };
        if let Some(abort) = abort {
            abort.abort();
        }
        // A lease granted but not handed over is given back.
        let_go(outcome);
    }
}

/// A set of Redis nodes and the settings of every lock taken through them.
#[pyclass(frozen)]
struct Locker {
    inner: redlease::Locker,
}

#[pymethods]
impl Locker {
    #[new]
    #[pyo3(signature = (
        nodes, *, ttl, wait, owner, fencing, lock_delay, key_prefix, node_timeout,
        connect_timeout, tls_ca, tls_cert, tls_key, durability, restart_quarantine
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        nodes: Vec<String>,
        ttl: f64,
        wait: Option<f64>,
        owner: Option<String>,
        fencing: bool,
        lock_delay: f64,
        key_prefix: Option<String>,
        node_timeout: Option<f64>,
        connect_timeout: Option<f64>,
        tls_ca: Option<std::path::PathBuf>,
        tls_cert: Option<std::path::PathBuf>,
        tls_key: Option<std::path::PathBuf>,
        durability: Option<(String, u32, f64, bool)>,
        restart_quarantine: Option<f64>,
    ) -> PyResult<Locker> {
        let rt = runtime()?;
        let mut builder = redlease::Locker::builder(nodes)
            .ttl(seconds("ttl", ttl)?)
            .fencing(fencing)
            .lock_delay(seconds("lock_delay", lock_delay)?);
        if let Some(wait) = wait {
            builder = builder.retry(RetryPolicy::within(seconds("wait", wait)?));
        }
        if let Some(owner) = owner {
            builder = builder.owner(owner);
        }
        if let Some(prefix) = key_prefix {
            builder = builder.key_prefix(prefix);
        }
        if let Some(t) = node_timeout {
            builder = builder.node_timeout(seconds("node_timeout", t)?);
        }
        if let Some(t) = connect_timeout {
            builder = builder.connect_timeout(seconds("connect_timeout", t)?);
        }
        if let Some(tls) = tls_settings(tls_ca, tls_cert, tls_key)? {
            builder = builder.tls(tls);
        }
        if let Some((kind, replicas, timeout, fsync)) = durability {
            let timeout = seconds("durability timeout", timeout)?;
            let mut d = match kind.as_str() {
                "required" => redlease::Durability::required(replicas, timeout),
                "best_effort" => redlease::Durability::best_effort(replicas, timeout),
                other => {
                    return Err(raw(
                        "invalid_input",
                        format!(
                            "durability: {other:?} is neither \"required\" nor \"best_effort\""
                        ),
                    ))
                }
            };
            if fsync {
                d = d.fsync();
            }
            builder = builder.durability(d);
        }
        if let Some(q) = restart_quarantine {
            let q = seconds("restart_quarantine", q)?;
            builder = builder.advanced(|a| a.restart_quarantine(q));
        }
        let _inside = rt.enter();
        let inner = builder.build().map_err(|e| error(&e))?;
        Ok(Locker { inner })
    }

    /// Takes `names` (one or several, all or none) in `mode` ("lock",
    /// "read", "write"), or `permits` permits of a semaphore of `of`:
    /// waiting up to `wait` seconds (None: the Locker's), or trying once.
    #[pyo3(signature = (names, *, mode, once, wait, ttl, keep_alive, permits, of))]
    #[allow(clippy::too_many_arguments)]
    fn acquire(
        &self,
        names: Vec<String>,
        mode: &str,
        once: bool,
        wait: Option<f64>,
        ttl: Option<f64>,
        keep_alive: bool,
        permits: u32,
        of: u32,
    ) -> PyResult<Pending> {
        let wait = wait.map(|w| seconds("wait", w)).transpose()?;
        let ttl = ttl.map(|t| seconds("ttl", t)).transpose()?;
        let locker = self.inner.clone();
        // Checked before anything is sent.
        let how = match (mode, names.len()) {
            (_, 0) => return Err(raw("invalid_input", "no name given")),
            ("lock", 1) => How::Lock,
            ("read", 1) => How::Read,
            ("write", 1) => How::Write,
            ("permits", 1) => How::Permits,
            ("lock", _) => How::All,
            (other, n) => {
                return Err(raw(
                    "invalid_input",
                    format!("{other} takes one name, not {n}"),
                ))
            }
        };
        let work = async move {
            let first = names[0].clone();
            let mut request = match how {
                How::Lock => locker.lock(first),
                How::Read => locker.read_lock(first),
                How::Write => locker.write_lock(first),
                How::Permits => locker.semaphore(first, of).acquire_many(permits),
                How::All => locker.lock_all(names),
            };
            if once {
                request = request.retry(RetryPolicy::attempts(std::num::NonZeroU32::MIN));
            } else if let Some(wait) = wait {
                request = request.wait(wait);
            }
            if let Some(ttl) = ttl {
                request = request.ttl(ttl);
            }
            if keep_alive {
                request = request.keep_alive();
            }
            request.await
        };
        start(work, |py, lease| {
            Ok(Py::new(py, Lease::new(lease))?.into_any())
        })
    }

    /// What every node says of `name` (see `LockStatus`), as a dict.
    fn inspect(&self, name: String) -> PyResult<Pending> {
        let locker = self.inner.clone();
        start(
            async move { locker.admin().inspect(&name).await },
            |py, status| status_dict(py, &status),
        )
    }

    /// Deletes the lock on `name` whoever holds it; on how many nodes.
    fn force_release(&self, name: String) -> PyResult<Pending> {
        let locker = self.inner.clone();
        start(
            async move { locker.admin().force_release(&name).await },
            |py, n| Ok(n.into_pyobject(py)?.into_any().unbind()),
        )
    }

    /// Takes over an exported lease.
    fn adopt(&self, handle: String) -> PyResult<Pending> {
        let locker = self.inner.clone();
        start(async move { locker.adopt(&handle).await }, |py, lease| {
            Ok(Py::new(py, Lease::new(lease))?.into_any())
        })
    }

    /// A watcher of `name`: its state now, then each change.
    fn watch(&self, name: String) -> Watcher {
        Watcher {
            inner: Arc::new(tokio::sync::Mutex::new(self.inner.watch(name))),
        }
    }

    /// Campaigns for the lead of the election `name` with `value`.
    #[pyo3(signature = (name, value, *, wait, ttl))]
    fn campaign(
        &self,
        name: String,
        value: String,
        wait: Option<f64>,
        ttl: Option<f64>,
    ) -> PyResult<Pending> {
        let wait = wait.map(|w| seconds("wait", w)).transpose()?;
        let ttl = ttl.map(|t| seconds("ttl", t)).transpose()?;
        let locker = self.inner.clone();
        start(
            async move {
                let election = locker.election(name);
                let mut campaign = election.campaign(value);
                if let Some(wait) = wait {
                    campaign = campaign.wait(wait);
                }
                if let Some(ttl) = ttl {
                    campaign = campaign.ttl(ttl);
                }
                campaign.await
            },
            |py, lead| Ok(Py::new(py, Leadership::new(lead))?.into_any()),
        )
    }

    /// Who leads the election `name` (a dict), or None.
    fn leader(&self, name: String) -> PyResult<Pending> {
        let locker = self.inner.clone();
        start(
            async move { locker.election(name).leader().await },
            |py, leader| leader_dict(py, leader.as_ref()),
        )
    }

    /// An observer of the election `name`: the leader now, then each change.
    fn observe(&self, name: String) -> Observer {
        Observer {
            inner: Arc::new(tokio::sync::Mutex::new(self.inner.election(name).observe())),
        }
    }

    /// Gives back every lease and stops taking locks.
    fn close(&self) -> PyResult<Pending> {
        let locker = self.inner.clone();
        start(
            async move {
                locker.close().await;
                Ok(())
            },
            |py, ()| Ok(py.None()),
        )
    }
}

/// A name's state, told at each change (`Locker::watch`).
#[pyclass(frozen)]
struct Watcher {
    inner: Arc<tokio::sync::Mutex<redlease::Watch>>,
}

#[pymethods]
impl Watcher {
    /// The state now on the first call, then the next change (a dict).
    fn changed(&self) -> PyResult<Pending> {
        let watch = self.inner.clone();
        start(
            async move { watch.lock().await.changed().await },
            |py, status| status_dict(py, &status),
        )
    }
}

/// An election's leader, told at each change (`Election::observe`).
#[pyclass(frozen)]
struct Observer {
    inner: Arc<tokio::sync::Mutex<redlease::Observe>>,
}

#[pymethods]
impl Observer {
    /// The leader now on the first call, then the next change (a dict, or
    /// None when nobody leads).
    fn next(&self) -> PyResult<Pending> {
        let observe = self.inner.clone();
        start(
            async move { observe.lock().await.next().await },
            |py, leader| leader_dict(py, leader.as_ref()),
        )
    }
}

/// The lead of an election (`Election::campaign`).
#[pyclass(frozen)]
struct Leadership {
    inner: Arc<Mutex<Option<redlease::Leadership>>>,
    term: u64,
    watcher: LostWatch,
}

impl Leadership {
    fn new(lead: redlease::Leadership) -> Leadership {
        Leadership {
            term: lead.term(),
            inner: Arc::new(Mutex::new(Some(lead))),
            watcher: LostWatch::default(),
        }
    }

    fn held(&self) -> MutexGuard<'_, Option<redlease::Leadership>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[pymethods]
impl Leadership {
    #[getter]
    fn term(&self) -> u64 {
        self.term
    }

    /// The value last proclaimed.
    #[getter]
    fn value(&self) -> Option<String> {
        self.held().as_ref().map(|l| l.value())
    }

    /// Why the lead can no longer be trusted, if it cannot.
    #[getter]
    fn lost_reason(&self) -> Option<String> {
        self.held()
            .as_ref()
            .map_or(Some("resigned".to_string()), |l| {
                l.lease().lost_reason().map(|r| r.to_string())
            })
    }

    /// Calls `callback(reason)` (from another thread) once the lead is lost.
    fn on_lost(&self, callback: Py<PyAny>) -> PyResult<()> {
        let lost = self.held().as_ref().map(|l| l.lost());
        match lost {
            Some(lost) => self.watcher.add(lost, callback),
            None => Ok(()),
        }
    }

    /// Publishes a new value on a quorum.
    fn proclaim(&self, value: String) -> PyResult<Pending> {
        let mut lead = self
            .held()
            .take()
            .ok_or_else(|| raw("not_held", "this lead was resigned already"))?;
        let slot = self.inner.clone();
        start(
            async move {
                let said = lead.proclaim(value).await;
                *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(lead);
                said
            },
            |py, ()| Ok(py.None()),
        )
    }

    /// Gives the lead up at once.
    fn resign(&self) -> PyResult<Pending> {
        let lead = self
            .held()
            .take()
            .ok_or_else(|| raw("not_held", "this lead was resigned already"))?;
        self.watcher.stop();
        start(lead.resign(), |py, ()| Ok(py.None()))
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        self.watcher.stop();
        let_go(self.held().take());
    }
}

/// Drops what a call or a Python object held (a lease, a lead, an
/// outcome holding one) on the runtime, where dropping it gives it back
/// in the background. In a forked child, which has no runtime, it is
/// forgotten instead: what it holds is the parent's to give back.
fn let_go<T>(held: Option<T>) {
    let Some(held) = held else {
        return;
    };
    match runtime() {
        Ok(rt) => {
            let _inside = rt.enter();
            drop(held);
        }
        Err(_) => std::mem::forget(held),
    }
}

/// A leader as a dict (value, term, revision, owner, since), or None.
fn leader_dict(py: Python<'_>, leader: Option<&redlease::Leader>) -> PyResult<Py<PyAny>> {
    let Some(leader) = leader else {
        return Ok(py.None());
    };
    let d = PyDict::new(py);
    d.set_item("value", &leader.value)?;
    d.set_item("term", leader.term)?;
    d.set_item("revision", leader.revision)?;
    let holder = leader.holder.as_ref();
    d.set_item("owner", holder.map(|h| h.owner.clone()))?;
    d.set_item(
        "since",
        holder
            .and_then(|h| h.since)
            .and_then(|s| s.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_secs_f64()),
    )?;
    Ok(d.into_any().unbind())
}

/// The tasks that wait to tell a lease's (or a lead's) `on_lost`
/// callbacks: stopped when it is let go (released, resigned, exported,
/// dropped), which is never told as lost.
#[derive(Default)]
struct LostWatch(Mutex<Vec<tokio::task::AbortHandle>>);

impl LostWatch {
    /// Calls `callback(reason)` once `lost` resolves, unless stopped first.
    fn add(
        &self,
        lost: impl std::future::Future<Output = redlease::LostReason> + Send + 'static,
        callback: Py<PyAny>,
    ) -> PyResult<()> {
        let task = runtime()?.spawn(async move {
            let why = lost.await.to_string();
            call_back(&callback, (why,));
        });
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(task.abort_handle());
        Ok(())
    }

    fn stop(&self) {
        let tasks = std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()));
        for task in tasks {
            task.abort();
        }
    }
}

/// The TLS settings of three optional files: a CA to trust, and a client
/// certificate with its key (both or neither).
fn tls_settings(
    ca: Option<std::path::PathBuf>,
    cert: Option<std::path::PathBuf>,
    key: Option<std::path::PathBuf>,
) -> PyResult<Option<redlease::TlsConfig>> {
    if ca.is_none() && cert.is_none() && key.is_none() {
        return Ok(None);
    }
    let mut tls = redlease::TlsConfig::new();
    if let Some(ca) = ca {
        tls = tls.read_ca_file(ca).map_err(|e| error(&e))?;
    }
    match (cert, key) {
        (Some(cert), Some(key)) => {
            tls = tls
                .read_client_cert_files(cert, key)
                .map_err(|e| error(&e))?;
        }
        (None, None) => {}
        (Some(_), None) | (None, Some(_)) => {
            return Err(raw(
                "invalid_input",
                "tls_cert and tls_key: a client certificate needs both, its certificate and \
                 its private key",
            ))
        }
    }
    Ok(Some(tls))
}

/// What an acquire takes.
enum How {
    Lock,
    Read,
    Write,
    Permits,
    All,
}

/// A held lock (or read hold, or permits).
#[pyclass(frozen)]
struct Lease {
    inner: Arc<Mutex<Option<redlease::Lease>>>,
    resource: String,
    fence: Option<u64>,
    /// The task that waits to tell `on_lost`'s callbacks: stopped when the
    /// lease is given back, exported or dropped (a lease let go is never
    /// told lost).
    watcher: LostWatch,
}

impl Lease {
    fn new(lease: redlease::Lease) -> Lease {
        Lease {
            resource: lease.resource().to_string(),
            fence: lease.fencing_token(),
            inner: Arc::new(Mutex::new(Some(lease))),
            watcher: LostWatch::default(),
        }
    }

    fn held(&self) -> MutexGuard<'_, Option<redlease::Lease>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn gone() -> PyErr {
        raw("not_held", "this lease was released already")
    }
}

#[pymethods]
impl Lease {
    #[getter]
    fn resource(&self) -> String {
        self.resource.clone()
    }

    #[getter]
    fn fencing_token(&self) -> Option<u64> {
        self.fence
    }

    /// Every name it holds, in the order asked.
    #[getter]
    fn resources(&self) -> Vec<String> {
        self.held().as_ref().map_or_else(
            || vec![self.resource.clone()],
            |l| l.resources().map(str::to_string).collect(),
        )
    }

    /// "exclusive", "shared" (a reader's) or "permit".
    #[getter]
    fn mode(&self) -> &'static str {
        match self.held().as_ref().map(|l| l.mode()) {
            Some(redlease::LockMode::Shared) => "shared",
            Some(redlease::LockMode::Permit) => "permit",
            _ => "exclusive",
        }
    }

    /// How many replicas acknowledged the acquire, with durability on.
    #[getter]
    fn replicas_acknowledged(&self) -> Option<u32> {
        self.held().as_ref().and_then(|l| l.replicas_acknowledged())
    }

    /// Seconds of validity left (0 once lost or released).
    #[getter]
    fn remaining(&self) -> f64 {
        self.held()
            .as_ref()
            .map_or(0.0, |l| l.remaining().as_secs_f64())
    }

    /// Why the lease can no longer be trusted, if it cannot.
    #[getter]
    fn lost_reason(&self) -> Option<String> {
        self.held()
            .as_ref()
            .map_or(Some("released".to_string()), |l| {
                l.lost_reason().map(|r| r.to_string())
            })
    }

    /// Calls `callback(reason)` (from another thread) once the lease can
    /// no longer be trusted.
    fn on_lost(&self, callback: Py<PyAny>) -> PyResult<()> {
        let lost = self.held().as_ref().map(|l| l.lost());
        match lost {
            Some(lost) => self.watcher.add(lost, callback),
            None => Ok(()),
        }
    }

    /// Gives the lease back.
    fn release(&self) -> PyResult<Pending> {
        let lease = self.held().take().ok_or_else(Lease::gone)?;
        self.watcher.stop();
        start(lease.release(), |py, ()| Ok(py.None()))
    }

    /// Moves its expiry to `ttl` seconds from now, at quorum.
    fn extend(&self, ttl: f64) -> PyResult<Pending> {
        let ttl = seconds("ttl", ttl)?;
        let mut lease = self.held().take().ok_or_else(Lease::gone)?;
        let slot = self.inner.clone();
        start(
            async move {
                let extended = lease.extend(ttl).await;
                *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(lease);
                extended
            },
            |py, ()| Ok(py.None()),
        )
    }

    /// A writer's lease turned into a read lease of the same names, with
    /// no writer in between: the new lease (this one then holds nothing).
    /// Refused, with nothing sent and this lease kept, unless it is held
    /// alone.
    fn downgrade(&self) -> PyResult<Pending> {
        let mut held = self.held();
        if held.as_ref().map(|l| l.mode()) != Some(redlease::LockMode::Exclusive) {
            return Err(match held.as_ref() {
                None => Lease::gone(),
                Some(_) => raw(
                    "invalid_input",
                    "only a lease held alone (a writer's) downgrades: this one is shared or a \
                     semaphore's permit",
                ),
            });
        }
        let lease = held.take().ok_or_else(Lease::gone)?;
        drop(held);
        self.watcher.stop();
        start(lease.downgrade(), |py, lease| {
            Ok(Py::new(py, Lease::new(lease))?.into_any())
        })
    }

    /// The lease as a handle another process can adopt (a secret); this
    /// one then holds nothing.
    fn export(&self) -> PyResult<String> {
        let lease = self.held().take().ok_or_else(Lease::gone)?;
        self.watcher.stop();
        Ok(lease.export())
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.watcher.stop();
        let_go(self.held().take());
    }
}

/// `status` as a dict: verdict, holders, counts, each node's answer.
fn status_dict(py: Python<'_>, status: &LockStatus) -> PyResult<Py<PyAny>> {
    let d = PyDict::new(py);
    let verdict = match status.verdict() {
        Verdict::Held { .. } => "held",
        Verdict::Free { .. } => "free",
        Verdict::Quarantined { .. } => "quarantined",
        _ => "unknown",
    };
    d.set_item("resource", &status.resource)?;
    d.set_item("verdict", verdict)?;
    let holders = PyList::empty(py);
    for h in status.holders() {
        let hd = PyDict::new(py);
        hd.set_item("owner", &h.owner)?;
        hd.set_item(
            "since",
            h.since
                .and_then(|s| s.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_secs_f64()),
        )?;
        hd.set_item("weight", h.weight)?;
        hd.set_item("in_lock_delay", h.in_lock_delay().map(|d| d.as_secs_f64()))?;
        holders.append(hd)?;
    }
    d.set_item("holders", holders)?;
    d.set_item("readers", status.readers())?;
    d.set_item("permits", status.permits())?;
    d.set_item("queued", status.queued())?;
    d.set_item("fencing_counter", status.fencing_counter())?;
    d.set_item("leader", leader_dict(py, status.leader().as_ref())?)?;
    let nodes = PyList::empty(py);
    for (node, answer) in &status.nodes {
        let nd = PyDict::new(py);
        nd.set_item("node", node.addr())?;
        match answer {
            Ok(state) => {
                nd.set_item("held", matches!(state.key, redlease::KeyState::Held { .. }))?
            }
            Err(e) => nd.set_item("error", e.to_string())?,
        }
        nodes.append(nd)?;
    }
    d.set_item("nodes", nodes)?;
    Ok(d.into_any().unbind())
}

#[pymodule]
fn _redlease(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Locker>()?;
    m.add_class::<Lease>()?;
    m.add_class::<Pending>()?;
    m.add_class::<Watcher>()?;
    m.add_class::<Observer>()?;
    m.add_class::<Leadership>()?;
    m.add_function(wrap_pyfunction!(shutdown, m)?)?;
    m.add_function(wrap_pyfunction!(log::set_logger, m)?)?;
    log::install();
    m.add("RawError", m.py().get_type::<RawError>())?;
    Ok(())
}
