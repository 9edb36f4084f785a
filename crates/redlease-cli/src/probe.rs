//! Talking to one node directly, outside any Locker: `doctor` reads what
//! the lock library has no business exposing (INFO, CONFIG, TIME), every
//! step bounded so a paused or black-holed node cannot hang it.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{Client, FromRedisValue, RedisError};

use crate::duration;
use crate::errors::chain;

/// One connection, with the timeout every request gets.
pub struct Probe {
    con: MultiplexedConnection,
    timeout: Duration,
}

impl Probe {
    /// Connects (and authenticates, if the URL says so) within `timeout`.
    pub async fn connect(url: &str, timeout: Duration) -> Result<Probe, String> {
        let client = Client::open(url).map_err(|e| describe_error(&e))?;
        let con = bounded(timeout, client.get_multiplexed_async_connection()).await?;
        Ok(Probe { con, timeout })
    }

    /// Sends one command and waits at most the timeout for its reply.
    pub async fn query<T: FromRedisValue>(&mut self, cmd: &redis::Cmd) -> Result<T, String> {
        bounded(self.timeout, cmd.query_async(&mut self.con)).await
    }
}

async fn bounded<T>(
    timeout: Duration,
    request: impl std::future::Future<Output = Result<T, RedisError>>,
) -> Result<T, String> {
    match tokio::time::timeout(timeout, request).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(describe_error(&e)),
        Err(_) => Err(format!(
            "no reply within {} (down, paused or overloaded?)",
            duration::show(timeout)
        )),
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
