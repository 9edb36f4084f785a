//! The express connection of a node's main [`ServerConn`]: a second
//! connection to the same server that a request writes and reads itself,
//! on its own task, whenever no other request is using it. Off by default
//! (`Advanced::express_connection`: it is slower under packet loss).
//!
//! A request through redis-rs's multiplexed connection crosses from the
//! caller's task to the connection's driver task, and its reply crosses
//! back: two wake-ups between threads per round trip. A caller that takes
//! one lock at a time never overlaps its requests, so it gains nothing from
//! that pipeline and pays for it on every round trip. Here, a request that
//! finds the express connection idle takes it, writes its bytes, reads its
//! replies with redis-rs's parser and puts it back. A request that finds it
//! busy, or not open, goes through the multiplexed connection as before, so
//! overlapping requests still share one pipeline.
//!
//! Three rules keep it exactly as trustworthy as the main connection:
//!
//! - **It belongs to one main connection.** It is opened only after the
//!   main connection (its *generation*) read its server's facts, and its
//!   own handshake reads `INFO server` and refuses a server with another
//!   `run_id`. A request never uses it once the main connection was
//!   replaced (a restart, a failover, `+switch-master`): it is closed and
//!   opened again for the new one.
//! - **Nothing half-read is ever reused.** A request that is cancelled
//!   while it holds the connection (its deadline passed, or its caller gave
//!   up), or that fails on it, closes it; the next one is opened in the
//!   background. Its replies are matched to requests by order alone, so a
//!   connection with a reply still owed is never handed on.
//! - **What it does not speak, it leaves alone.** TLS, Unix sockets and
//!   transactions go through the main connection; so does every request
//!   while the express connection is opening or held back after a failed
//!   open.
//!
//! A request cut off by its deadline may still run on the server after a
//! later request sent on the other connection, where the main connection
//! alone would have kept them in order. Every lock request is checked
//! against the lease's token on the server, so the worst outcome is the
//! one a lost reply already has: a key held by no one until it expires.
//!
//! # Cancel safety
//!
//! Every method is cancel safe in the sense above: dropping a request's
//! future closes the connection it held and leaves the node usable.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use combine::parser::combinator::AnySendSyncPartialState;
use combine::stream::{Decoder, PointerOffset};
use redis::{Cmd, ConnectionAddr, Pipeline, ProtocolVersion, RedisError, RedisResult, Value};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::core::vote_guard::parse_info_server;

/// How long after a failed open the next one waits.
const HOLD_BACK: Duration = Duration::from_secs(1);

/// How long an opener has, beyond its own timeout, before the next request
/// presumes it gone and opens again.
pub(crate) const OPENER_GRACE: Duration = Duration::from_secs(1);

/// Where and as whom the express connection connects: the main
/// connection's server, when it is reached over plain TCP.
pub(crate) struct Target {
    host: String,
    port: u16,
    username: Option<String>,
    password: Option<String>,
    db: i64,
    resp3: bool,
}

impl Target {
    /// The express target of `client`'s server, if it has one (plain TCP).
    pub(crate) fn of(client: &redis::Client) -> Option<Target> {
        let info = client.get_connection_info();
        let ConnectionAddr::Tcp(host, port) = info.addr() else {
            return None;
        };
        let settings = info.redis_settings();
        Some(Target {
            host: host.clone(),
            port: *port,
            username: settings.username().map(str::to_owned),
            password: settings.password().map(str::to_owned),
            db: settings.db(),
            resp3: settings.protocol() == ProtocolVersion::RESP3,
        })
    }
}

/// One open express connection.
pub(crate) struct Lane {
    /// The main connection it belongs to.
    generation: u64,
    stream: TcpStream,
    decoder: Decoder<AnySendSyncPartialState, PointerOffset<[u8]>>,
    /// The request being written (kept, so its capacity is reused).
    out: Vec<u8>,
}

impl Lane {
    /// Connects to `target` and checks that the server is the one whose
    /// `run_id` the main connection read; all within `timeout`.
    pub(crate) async fn open(
        target: &Target,
        generation: u64,
        run_id: &str,
        timeout: Duration,
    ) -> RedisResult<Lane> {
        let opening = async {
            let stream = TcpStream::connect((target.host.as_str(), target.port)).await?;
            stream.set_nodelay(true)?;
            let mut lane = Lane {
                generation,
                stream,
                decoder: Decoder::new(),
                out: Vec::with_capacity(256),
            };
            let handshake = handshake(target);
            let replies = lane.pipeline(&handshake, 0, handshake.len()).await?;
            for reply in &replies {
                if let Value::ServerError(e) = reply {
                    return Err(RedisError::from(e.clone()));
                }
            }
            let info: String = match replies.last() {
                Some(info) => redis::from_redis_value_ref(info)?,
                None => String::new(),
            };
            let facts = parse_info_server(&info, Instant::now(), None).map_err(|why| {
                RedisError::from((
                    redis::ErrorKind::UnexpectedReturnType,
                    "the server did not say who it is",
                    why,
                ))
            })?;
            if facts.run_id != run_id {
                return Err(RedisError::from((
                    redis::ErrorKind::Io,
                    "the express connection reached another server process",
                )));
            }
            Ok(lane)
        };
        match tokio::time::timeout(timeout, opening).await {
            Ok(result) => result,
            Err(_) => Err(RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the express connection did not open in time",
            ))),
        }
    }

    /// Sends `cmd` and reads its reply.
    pub(crate) async fn send(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        self.out.clear();
        cmd.write_packed_command(&mut self.out);
        self.stream.write_all(&self.out).await?;
        self.read().await
    }

    /// Sends `pipeline` and reads the replies of its commands
    /// `offset..offset + count` (reading and dropping those before).
    pub(crate) async fn pipeline(
        &mut self,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        self.stream
            .write_all(&pipeline.get_packed_pipeline())
            .await?;
        for _ in 0..offset {
            self.read().await?;
        }
        let mut replies = Vec::with_capacity(count);
        for _ in 0..count {
            replies.push(self.read().await?);
        }
        Ok(replies)
    }

    /// The next reply, passing over RESP3 pushes (none is asked for on
    /// this connection).
    async fn read(&mut self) -> RedisResult<Value> {
        loop {
            let value = redis::parse_redis_value_async(&mut self.decoder, &mut self.stream).await?;
            if !matches!(value, Value::Push { .. }) {
                return Ok(value);
            }
        }
    }
}

/// The commands that open an express connection: the credentials and the
/// protocol, the database, then `INFO server`.
fn handshake(target: &Target) -> Pipeline {
    let mut pipe = redis::pipe();
    let credentials = target
        .password
        .as_deref()
        .map(|password| (target.username.as_deref().unwrap_or("default"), password));
    if target.resp3 {
        let hello = pipe.cmd("HELLO").arg(3);
        if let Some((username, password)) = credentials {
            hello.arg("AUTH").arg(username).arg(password);
        }
    } else if let Some((username, password)) = credentials {
        pipe.cmd("AUTH").arg(username).arg(password);
    }
    if target.db != 0 {
        pipe.cmd("SELECT").arg(target.db);
    }
    pipe.cmd("INFO").arg("server");
    pipe
}

/// The express connection's place, shared by a main connection's
/// requests.
#[derive(Default)]
pub(crate) struct Express {
    slot: Mutex<Slot>,
    /// Requests it served; read by the tests.
    served: AtomicU64,
}

#[derive(Default)]
enum Slot {
    #[default]
    Closed,
    /// An open failed: the next waits until `not_before`.
    HeldBack {
        not_before: Instant,
    },
    /// An opener is at work; after `until` it is presumed gone (its task
    /// was dropped) and the next request opens again.
    Opening {
        until: Instant,
    },
    Idle(Lane),
    /// A request holds it.
    Busy,
}

/// What a request found in the express connection's place.
pub(crate) enum Found<'a> {
    /// The connection, idle and of the current generation: use it.
    Lane(Lent<'a>),
    /// Nothing open: the caller opens it, in the background (see
    /// [`Express::open`]), and this request takes the main connection.
    Open,
    /// Busy, opening or held back: take the main connection.
    Pass,
}

fn lock(m: &Mutex<Slot>) -> std::sync::MutexGuard<'_, Slot> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Express {
    /// Looks for an idle connection of main connection `generation`. An
    /// opener told [`Found::Open`] has `patience` to finish.
    pub(crate) fn find(&self, generation: u64, patience: Duration) -> Found<'_> {
        let mut slot = lock(&self.slot);
        let now = Instant::now();
        let open = match &*slot {
            Slot::Idle(lane) if lane.generation == generation => {
                let Slot::Idle(lane) = std::mem::replace(&mut *slot, Slot::Busy) else {
                    unreachable!("matched as idle")
                };
                return Found::Lane(Lent {
                    express: self,
                    lane: Some(lane),
                    clean: false,
                });
            }
            // A connection of a replaced main connection is closed here.
            Slot::Idle(_) | Slot::Closed => true,
            Slot::HeldBack { not_before } => now >= *not_before,
            Slot::Opening { until } => now >= *until,
            Slot::Busy => false,
        };
        if !open {
            return Found::Pass;
        }
        *slot = Slot::Opening {
            until: now.checked_add(patience).unwrap_or(now),
        };
        Found::Open
    }

    /// Takes what the opener of a [`Found::Open`] got from [`Lane::open`].
    pub(crate) fn opened(&self, opened: RedisResult<Lane>) {
        let mut slot = lock(&self.slot);
        if !matches!(*slot, Slot::Opening { .. }) {
            return;
        }
        *slot = match opened {
            Ok(lane) => Slot::Idle(lane),
            Err(e) => {
                tracing::debug!(error = %e, "could not open the express connection");
                let now = Instant::now();
                Slot::HeldBack {
                    not_before: now.checked_add(HOLD_BACK).unwrap_or(now),
                }
            }
        };
    }

    /// Requests served on the express connection so far.
    #[cfg(test)]
    pub(crate) fn served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }
}

/// The express connection, lent to one request. Dropped without
/// [`done`](Lent::done) (cancelled, or failed), it closes the connection.
pub(crate) struct Lent<'a> {
    express: &'a Express,
    lane: Option<Lane>,
    clean: bool,
}

impl Lent<'_> {
    /// The connection (always present while lent).
    pub(crate) fn lane(&mut self) -> &mut Lane {
        self.lane.as_mut().expect("a lent connection is present")
    }

    /// The main connection this one belongs to.
    pub(crate) fn generation(&self) -> u64 {
        self.lane.as_ref().map_or(0, |lane| lane.generation)
    }

    /// The request read every reply it sent for: the connection goes back
    /// for the next request.
    pub(crate) fn done(mut self) {
        self.clean = true;
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        self.express.served.fetch_add(1, Ordering::Relaxed);
        let lane = self.lane.take().filter(|_| self.clean);
        let mut slot = lock(&self.express.slot);
        *slot = match lane {
            Some(lane) => Slot::Idle(lane),
            None => Slot::Closed,
        };
    }
}
