//! What `doctor` learns from the sentinels of a `redis+sentinel://` node:
//! which of them answer, which primary each names for the service, its
//! replicas and the other sentinels as they see them, and whether they can
//! authorize a failover (`SENTINEL CKQUORUM`); and from the primary itself,
//! its `ROLE`. Only reads, each bounded by the timeout.

use std::collections::HashMap;
use std::time::Duration;

use redis::{ConnectionInfo, IntoConnectionInfo, Value};

use crate::facts::text;
use crate::probe::{Failure, Probe};
use redlease::SentinelUrl;

/// One sentinel's answers.
pub struct Answer {
    /// `host:port` of the sentinel.
    pub sentinel: String,
    /// `Err`: it could not be reached, or refused
    /// `SENTINEL GET-MASTER-ADDR-BY-NAME`.
    pub told: Result<Told, Failure>,
}

/// What a sentinel says of the service.
pub struct Told {
    /// The primary's `host:port`; `None`: it does not know the service.
    pub primary: Option<String>,
    /// `SENTINEL REPLICAS`: each replica's fields (`ip`, `port`, `flags`,
    /// ...).
    pub replicas: Result<Vec<HashMap<String, String>>, Failure>,
    /// `SENTINEL SENTINELS`: how many other sentinels it knows.
    pub others: Result<usize, Failure>,
    /// `SENTINEL CKQUORUM`'s reply: whether a failover can be authorized.
    pub ckquorum: Result<String, Failure>,
}

/// The primary's own word (`ROLE`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Role {
    /// `master`, `slave` or `sentinel`.
    pub role: String,
    /// Replicas connected to it (a primary's ROLE lists them).
    pub replicas: usize,
}

/// Connection settings for `addr` (`host:port`) with TLS as the URL says.
fn server_info(
    tls: bool,
    addr: &str,
    username: Option<&String>,
    password: Option<&String>,
    db: i64,
) -> Result<ConnectionInfo, Failure> {
    let scheme = if tls { "rediss" } else { "redis" };
    let info = format!("{scheme}://{addr}")
        .into_connection_info()
        .map_err(|e| Failure::Failed(format!("{addr} is not an address: {e}")))?;
    let mut redis = info.redis_settings().clone().set_db(db);
    if let Some(user) = username {
        redis = redis.set_username(user);
    }
    if let Some(password) = password {
        redis = redis.set_password(password);
    }
    Ok(info.set_redis_settings(redis))
}

/// The primary's connection settings: its credentials and database.
pub fn primary_info(url: &SentinelUrl, addr: &str) -> Result<ConnectionInfo, Failure> {
    server_info(
        url.tls,
        addr,
        url.username.as_ref(),
        url.password.as_ref(),
        url.db,
    )
}

/// Asks every sentinel at once.
pub async fn ask_all(
    url: &SentinelUrl,
    timeout: Duration,
    tls: Option<&redis::TlsCertificates>,
) -> Vec<Answer> {
    let asks: Vec<_> = url
        .sentinels
        .iter()
        .map(|sentinel| {
            let (url, sentinel, tls) = (url.clone(), sentinel.clone(), tls.cloned());
            tokio::spawn(async move { ask(&url, &sentinel, timeout, tls.as_ref()).await })
        })
        .collect();
    let mut answers = Vec::new();
    for (sentinel, asked) in url.sentinels.iter().zip(asks) {
        answers.push(Answer {
            sentinel: sentinel.clone(),
            told: asked
                .await
                .unwrap_or_else(|e| Err(Failure::Failed(format!("internal error: {e}")))),
        });
    }
    answers
}

async fn ask(
    url: &SentinelUrl,
    sentinel: &str,
    timeout: Duration,
    tls: Option<&redis::TlsCertificates>,
) -> Result<Told, Failure> {
    let info = server_info(
        url.tls,
        sentinel,
        url.sentinel_username.as_ref(),
        url.sentinel_password.as_ref(),
        0,
    )?;
    let mut probe = Probe::connect_to(info, timeout, tls).await?;
    let sentinel_cmd = |sub: &str| {
        let mut cmd = redis::cmd("SENTINEL");
        cmd.arg(sub).arg(&url.service);
        cmd
    };
    let primary: Option<(String, u16)> = probe
        .query(&sentinel_cmd("GET-MASTER-ADDR-BY-NAME"))
        .await?;
    let Some((host, port)) = primary else {
        let unknown = Failure::Failed("the service is unknown".to_string());
        return Ok(Told {
            primary: None,
            replicas: Err(unknown.clone()),
            others: Err(unknown.clone()),
            ckquorum: Err(unknown),
        });
    };
    let primary = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    // REPLICAS came with Redis 5; SLAVES before.
    let replicas = match probe.query(&sentinel_cmd("REPLICAS")).await {
        Err(Failure::Denied(why)) => Err(Failure::Denied(why)),
        Err(_) => probe.query(&sentinel_cmd("SLAVES")).await,
        replicas => replicas,
    };
    let others = probe
        .query::<Vec<Value>>(&sentinel_cmd("SENTINELS"))
        .await
        .map(|list| list.len());
    let ckquorum = probe.query::<String>(&sentinel_cmd("CKQUORUM")).await;
    Ok(Told {
        primary: Some(primary),
        replicas,
        others,
        ckquorum,
    })
}

/// Asks the server at `info` for its `ROLE`.
pub async fn role(
    info: ConnectionInfo,
    timeout: Duration,
    tls: Option<&redis::TlsCertificates>,
) -> Result<Role, Failure> {
    let mut probe = Probe::connect_to(info, timeout, tls).await?;
    let reply: Value = probe.query(&redis::cmd("ROLE")).await?;
    parse_role(&reply).ok_or_else(|| Failure::Failed("ROLE gave an unexpected reply".to_string()))
}

/// `ROLE`: `[master, offset, [[ip, port, offset], ...]]`, or
/// `[slave, host, port, state, offset]`, or `[sentinel, [names]]`.
fn parse_role(reply: &Value) -> Option<Role> {
    let Value::Array(items) = reply else {
        return None;
    };
    let role = text(items.first()?)?;
    let replicas = match (role.as_str(), items.get(2)) {
        ("master", Some(Value::Array(replicas))) => replicas.len(),
        _ => 0,
    };
    Some(Role { role, replicas })
}

/// A replica's `host:port` from its SENTINEL REPLICAS fields.
pub fn replica_addr(fields: &HashMap<String, String>) -> String {
    match (fields.get("ip"), fields.get("port")) {
        (Some(ip), Some(port)) => format!("{ip}:{port}"),
        _ => fields
            .get("name")
            .cloned()
            .unwrap_or_else(|| "?".to_string()),
    }
}

/// Whether a replica is usable as the sentinels see it (not down, linked
/// to the primary).
pub fn replica_up(fields: &HashMap<String, String>) -> bool {
    let flags = fields.get("flags").map_or("", String::as_str);
    !flags
        .split(',')
        .any(|f| matches!(f, "s_down" | "o_down" | "disconnected"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn role_names_the_role_and_a_primarys_replicas() {
        let primary = Value::Array(vec![
            bulk("master"),
            Value::Int(3129659),
            Value::Array(vec![Value::Array(vec![
                bulk("127.0.0.1"),
                bulk("9001"),
                bulk("3129242"),
            ])]),
        ]);
        assert_eq!(
            parse_role(&primary),
            Some(Role {
                role: "master".into(),
                replicas: 1
            })
        );
        let replica = Value::Array(vec![
            bulk("slave"),
            bulk("127.0.0.1"),
            Value::Int(9000),
            bulk("connected"),
            Value::Int(3167038),
        ]);
        assert_eq!(parse_role(&replica).unwrap().role, "slave");
        assert_eq!(parse_role(&replica).unwrap().replicas, 0);
    }

    #[test]
    fn replicas_down_are_told_apart() {
        let fields = |flags: &str| {
            HashMap::from([
                ("ip".to_string(), "10.0.0.1".to_string()),
                ("port".to_string(), "6380".to_string()),
                ("flags".to_string(), flags.to_string()),
            ])
        };
        assert!(replica_up(&fields("slave")));
        assert!(!replica_up(&fields("s_down,slave,disconnected")));
        assert_eq!(replica_addr(&fields("slave")), "10.0.0.1:6380");
    }
}
