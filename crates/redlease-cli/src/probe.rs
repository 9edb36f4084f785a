//! Talking to one node directly, outside any Locker: `doctor` reads what
//! the lock library has no business exposing (INFO, CONFIG, TIME), every
//! step bounded so a paused or black-holed node cannot hang it.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{
    Client, ConnectionAddr, ConnectionInfo, FromRedisValue, IntoConnectionInfo, ProtocolVersion,
    RedisError,
};

use crate::duration;
use crate::errors::{chain, diagnose_redis, Diagnosis};

/// One connection, with the timeout every request gets.
pub struct Probe {
    client: Client,
    con: MultiplexedConnection,
    timeout: Duration,
    resp3: bool,
}

/// Why a request got no usable answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The server answered that this user may not run it (ACL: `NOPERM`).
    /// The reply still came back: the node is reachable.
    Denied(String),
    /// The server does not know the command (`ERR unknown command`): it is
    /// older than the command.
    Unknown(String),
    /// The server refused our credentials, or what answered is no Redis
    /// server: the URL is wrong, and no ACL grant helps.
    Diagnosed(Diagnosis),
    /// The TLS handshake failed: what the TLS library said (an unknown
    /// issuer, a name the certificate does not hold, a client certificate
    /// the server wanted).
    Tls(String),
    /// Anything else: no connection, no reply in time, another error.
    Failed(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Denied(why) | Failure::Unknown(why) | Failure::Failed(why) => f.write_str(why),
            Failure::Tls(why) => write!(f, "TLS handshake failed: {why}"),
            Failure::Diagnosed(diagnosis) => diagnosis.fmt(f),
        }
    }
}

impl From<Failure> for String {
    fn from(failure: Failure) -> String {
        failure.to_string()
    }
}

impl Probe {
    /// Connects (and authenticates, if the URL says so) within `timeout`;
    /// a `rediss://` node with `tls`'s CA and client certificate, if given.
    pub async fn connect(
        url: &str,
        timeout: Duration,
        tls: Option<&redis::TlsCertificates>,
    ) -> Result<Probe, Failure> {
        let info = url.into_connection_info().map_err(|e| classify(&e))?;
        Probe::connect_to(info, timeout, tls).await
    }

    /// [`connect`](Probe::connect) to an address and credentials put
    /// together by the caller (a cluster's primary, the sentinels' one).
    pub async fn connect_to(
        info: ConnectionInfo,
        timeout: Duration,
        tls: Option<&redis::TlsCertificates>,
    ) -> Result<Probe, Failure> {
        let client = if matches!(info.addr(), ConnectionAddr::TcpTls { .. }) {
            // rustls needs a process-wide crypto provider; the library
            // installs the same one for its own connections.
            let _ = rustls::crypto::ring::default_provider().install_default();
            match tls {
                Some(tls) => Client::build_with_tls(info, tls.clone()),
                None => Client::open(info),
            }
        } else {
            Client::open(info)
        }
        .map_err(|e| classify(&e))?;
        let resp3 =
            client.get_connection_info().redis_settings().protocol() != ProtocolVersion::RESP2;
        // A PING too: a server that serves only TLS closes a plain
        // connection at its first command, and a failure before any reply
        // may say that the URL's scheme does not match the port.
        let connect = async {
            let mut con = client.get_multiplexed_async_connection().await?;
            match redis::cmd("PING").query_async::<()>(&mut con).await {
                // Any reply is an answer, a refusal (NOPERM) too.
                Err(e) if e.code().is_none() => Err(e),
                _ => Ok(con),
            }
        };
        match tokio::time::timeout(timeout, connect).await {
            Ok(Ok(con)) => Ok(Probe {
                client,
                con,
                timeout,
                resp3,
            }),
            failed => {
                let e = failed.as_ref().ok().and_then(|r| r.as_ref().err());
                let addr = client.get_connection_info().addr();
                if let Some(told) = wrong_scheme(addr, e, timeout).await {
                    return Err(Failure::Diagnosed(told));
                }
                match failed {
                    Ok(Err(e)) => Err(classify(&e)),
                    _ => Err(no_reply(timeout)),
                }
            }
        }
    }

    /// Whether this connection speaks RESP3 (the URL asked for it).
    pub fn resp3(&self) -> bool {
        self.resp3
    }

    /// Subscribes to `channel` and unsubscribes again, on a connection of
    /// its own (as waiters do), within the timeout.
    pub async fn try_subscribe(&self, channel: &str) -> Result<(), Failure> {
        bounded(self.timeout, async {
            let mut pubsub = self.client.get_async_pubsub().await?;
            pubsub.subscribe(channel).await?;
            pubsub.unsubscribe(channel).await
        })
        .await
    }

    /// Sends one command and waits at most the timeout for its reply.
    pub async fn query<T: FromRedisValue>(&mut self, cmd: &redis::Cmd) -> Result<T, Failure> {
        bounded(self.timeout, cmd.query_async(&mut self.con)).await
    }
}

async fn bounded<T>(
    timeout: Duration,
    request: impl std::future::Future<Output = Result<T, RedisError>>,
) -> Result<T, Failure> {
    match tokio::time::timeout(timeout, request).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(classify(&e)),
        Err(_) => Err(no_reply(timeout)),
    }
}

fn no_reply(timeout: Duration) -> Failure {
    Failure::Failed(format!(
        "no reply within {} (down, paused or overloaded?)",
        duration::show(timeout)
    ))
}

/// What a new connection to `addr` that failed before any reply (`e`, or
/// no answer in time) says about a URL whose scheme does not match the
/// port, as the library tells it for its own connections.
async fn wrong_scheme(
    addr: &ConnectionAddr,
    e: Option<&RedisError>,
    timeout: Duration,
) -> Option<Diagnosis> {
    Some(match redlease::scheme_mismatch(addr, e, timeout).await? {
        redlease::SchemeMismatch::SpeaksTls => Diagnosis::SpeaksTls,
        redlease::SchemeMismatch::SpeaksPlain => Diagnosis::SpeaksPlain,
    })
}

/// A redis-rs error as a [`Failure`], described for a table cell.
pub fn classify(e: &RedisError) -> Failure {
    if let Some(diagnosis) = diagnose_redis(e) {
        return Failure::Diagnosed(diagnosis);
    }
    if let Some(why) = redlease::tls_handshake_failure(e) {
        return Failure::Tls(why);
    }
    let text = describe_error(e);
    match e.code() {
        Some("NOPERM") => Failure::Denied(text),
        Some("ERR") if e.detail().is_some_and(|d| d.starts_with("unknown command")) => {
            Failure::Unknown(text)
        }
        _ => Failure::Failed(text),
    }
}

/// A redis-rs error as a short phrase for a table cell.
fn describe_error(e: &RedisError) -> String {
    if let Some(code) = e.code() {
        return format!("Redis replied {code} {}", e.detail().unwrap_or_default());
    }
    let text = chain(e);
    if text.contains("Connection refused") {
        "connection refused (nothing listens there)".to_string()
    } else {
        text
    }
}
