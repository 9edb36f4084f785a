//! The three forms a node's URL takes, told apart and split into parts.
//! Pure: no I/O, no redis-rs client yet.
//!
//! - `redis://[user:password@]host[:port][/db]` (or `rediss://`, or
//!   `redis+unix://` / `unix://`): one server, handed to redis-rs as it is.
//! - `redis+cluster://[user:password@]host:port,host:port,...` (or
//!   `rediss+cluster://`): a Redis Cluster, reached through any of the seed
//!   addresses; the credentials and TLS apply to every cluster node.
//! - `redis+sentinel://[user:password@]host:port,.../service[/db]` (or
//!   `rediss+sentinel://`): the primary that the sentinels name `service`.
//!   The credentials, database and TLS are those of the primary; sentinels
//!   that require their own are given as query parameters
//!   `sentinel_username=` and `sentinel_password=`.
//!
//! A cluster seed defaults to port 6379, a sentinel to 26379.

/// What a node URL names: one server, a Redis Cluster, or the primary
/// that Sentinels name. For tools that reach a node's servers themselves
/// (the `redlease doctor` command does); a Locker takes the URL as text.
///
/// ```
/// use redlease::NodeUrl;
///
/// let url = NodeUrl::parse("redis+sentinel://s1,s2:26380/locks")?;
/// let NodeUrl::Sentinel(sentinel) = url else { unreachable!() };
/// assert_eq!(sentinel.sentinels, ["s1:26379", "s2:26380"]);
/// assert_eq!(sentinel.service, "locks");
/// # Ok::<(), redlease::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeUrl {
    /// One server: the URL, unchanged.
    Server(String),
    /// A Redis Cluster: one `redis://` (or `rediss://`) URL per seed, each
    /// with the credentials.
    Cluster {
        /// `redis://[user:password@]host:port` per seed.
        seeds: Vec<String>,
    },
    /// A Sentinel-managed primary.
    Sentinel(SentinelUrl),
}

/// The parts of a `redis+sentinel://` URL, decoded. `Debug` shows no
/// password.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SentinelUrl {
    /// `host:port` of each sentinel.
    pub sentinels: Vec<String>,
    /// The name the sentinels monitor the primary under.
    pub service: String,
    /// `rediss+sentinel://`: TLS to the sentinels and the primary.
    pub tls: bool,
    /// The primary's database.
    pub db: i64,
    /// The primary's user.
    pub username: Option<String>,
    /// The primary's password.
    pub password: Option<String>,
    /// The sentinels' own user, if they require one.
    pub sentinel_username: Option<String>,
    /// The sentinels' own password.
    pub sentinel_password: Option<String>,
}

impl std::fmt::Debug for SentinelUrl {
    // Never the passwords.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelUrl")
            .field("sentinels", &self.sentinels)
            .field("service", &self.service)
            .field("tls", &self.tls)
            .field("db", &self.db)
            .finish_non_exhaustive()
    }
}

impl NodeUrl {
    /// Tells the form of `url` and takes a cluster or sentinel URL apart
    /// (a server URL is left whole, for redis-rs). The error says what is
    /// wrong, without the credentials. No I/O.
    pub fn parse(url: &str) -> Result<NodeUrl, crate::Error> {
        NodeUrl::parse_reason(url).map_err(|reason| {
            crate::Error::invalid("urls", format!("{}: {reason}", redact_url(url)))
        })
    }

    /// [`parse`](Self::parse), with the reason alone as the error.
    pub(crate) fn parse_reason(url: &str) -> Result<NodeUrl, String> {
        let Some((scheme, rest)) = url.split_once("://") else {
            return Ok(NodeUrl::Server(url.to_string()));
        };
        let (tls, kind) = match scheme {
            "redis+cluster" => (false, Kind::Cluster),
            "rediss+cluster" => (true, Kind::Cluster),
            "redis+sentinel" => (false, Kind::Sentinel),
            "rediss+sentinel" => (true, Kind::Sentinel),
            _ => return Ok(NodeUrl::Server(url.to_string())),
        };
        let (rest, query) = match rest.split_once('?') {
            Some((rest, query)) => (rest, Some(query)),
            None => (rest, None),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, ""),
        };
        let (userinfo, hosts) = match authority.rfind('@') {
            Some(at) => (Some(&authority[..at]), &authority[at + 1..]),
            None => (None, authority),
        };
        let default_port = match kind {
            Kind::Cluster => 6379,
            Kind::Sentinel => 26379,
        };
        let hosts = hosts
            .split(',')
            .map(|h| host_port(h, default_port))
            .collect::<Result<Vec<_>, _>>()?;
        let params = query_params(query.unwrap_or(""))?;
        match kind {
            Kind::Cluster => {
                if !path.is_empty() {
                    return Err(format!(
                        "a cluster URL has no path (a cluster has only database 0), found `/{path}`"
                    ));
                }
                if let Some((key, _)) = params.first() {
                    return Err(format!("unknown parameter `{key}` in a cluster URL"));
                }
                let scheme = if tls { "rediss" } else { "redis" };
                let credentials = userinfo.map(|u| format!("{u}@")).unwrap_or_default();
                Ok(NodeUrl::Cluster {
                    seeds: hosts
                        .iter()
                        .map(|h| format!("{scheme}://{credentials}{h}"))
                        .collect(),
                })
            }
            Kind::Sentinel => {
                let mut parts = path.split('/').filter(|p| !p.is_empty());
                let service = parts.next().ok_or(
                    "a sentinel URL names the monitored primary after the hosts, \
                     as in redis+sentinel://s1:26379,s2:26379/mymaster",
                )?;
                let db = match parts.next() {
                    None => 0,
                    Some(db) => db
                        .parse()
                        .map_err(|_| format!("the database `{db}` is not a number"))?,
                };
                if let Some(extra) = parts.next() {
                    return Err(format!("unexpected `/{extra}` after the database"));
                }
                let (username, password) = split_userinfo(userinfo);
                let mut url = SentinelUrl {
                    sentinels: hosts,
                    service: decode(service)?,
                    tls,
                    db,
                    username,
                    password,
                    sentinel_username: None,
                    sentinel_password: None,
                };
                for (key, value) in params {
                    match key.as_str() {
                        "sentinel_username" => url.sentinel_username = Some(value),
                        "sentinel_password" => url.sentinel_password = Some(value),
                        other => {
                            return Err(format!(
                                "unknown parameter `{other}` in a sentinel URL \
                                 (known: sentinel_username, sentinel_password)"
                            ))
                        }
                    }
                }
                Ok(NodeUrl::Sentinel(url))
            }
        }
    }

    /// How the node is named in errors, logs and metrics: its addresses,
    /// never its credentials. `None` for a server URL (see
    /// [`NodeId::from_url`](crate::NodeId::from_url)).
    ///
    /// ```
    /// let url = redlease::NodeUrl::parse("redis+cluster://app:pw@a:7000,b:7001")?;
    /// assert_eq!(url.describe().unwrap(), "cluster a:7000,b:7001");
    /// # Ok::<(), redlease::Error>(())
    /// ```
    pub fn describe(&self) -> Option<String> {
        match self {
            NodeUrl::Server(_) => None,
            NodeUrl::Cluster { seeds } => {
                let hosts: Vec<&str> = seeds.iter().map(|s| after_credentials(s)).collect();
                Some(format!("cluster {}", hosts.join(",")))
            }
            NodeUrl::Sentinel(s) => {
                let db = if s.db == 0 {
                    String::new()
                } else {
                    format!("/{}", s.db)
                };
                Some(format!(
                    "sentinel {}/{}{db}",
                    s.sentinels.join(","),
                    s.service
                ))
            }
        }
    }
}

enum Kind {
    Cluster,
    Sentinel,
}

/// `host[:port]` (or `[v6]:port`), with the default port filled in.
fn host_port(text: &str, default_port: u16) -> Result<String, String> {
    if text.is_empty() {
        return Err("an empty host in the list of hosts".to_string());
    }
    let (host, port) = if let Some(v6) = text.strip_prefix('[') {
        let (host, rest) = v6
            .split_once(']')
            .ok_or_else(|| format!("`{text}` opens `[` without closing it"))?;
        let host = format!("[{host}]");
        match rest.strip_prefix(':') {
            Some(port) => (host, Some(port)),
            None if rest.is_empty() => (host, None),
            None => return Err(format!("`{text}` is not host:port")),
        }
    } else {
        match text.split_once(':') {
            Some((host, port)) => (host.to_string(), Some(port)),
            None => (text.to_string(), None),
        }
    };
    let port = match port {
        None => default_port,
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|&p| p != 0)
            .ok_or_else(|| format!("the port in `{text}` is not a port number"))?,
    };
    Ok(format!("{host}:{port}"))
}

fn split_userinfo(userinfo: Option<&str>) -> (Option<String>, Option<String>) {
    let Some(userinfo) = userinfo else {
        return (None, None);
    };
    let (user, password) = match userinfo.split_once(':') {
        Some((user, password)) => (user, Some(password)),
        None => (userinfo, None),
    };
    let user = decode(user).ok().filter(|u| !u.is_empty());
    let password = password.and_then(|p| decode(p).ok());
    (user, password)
}

fn query_params(query: &str) -> Result<Vec<(String, String)>, String> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            Ok((decode(key)?, decode(value)?))
        })
        .collect()
}

/// Percent-decoding, as in URLs (`%40` is `@`).
fn decode(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or("a `%` in the URL is not followed by two hex digits")?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "the URL decodes to invalid UTF-8".to_string())
}

/// The part of `scheme://[credentials@]rest` after the credentials.
fn after_credentials(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    rest.rsplit_once('@').map_or(rest, |(_, hosts)| hosts)
}

/// A Redis URL fit to print: any `user:password@` becomes `***@`.
///
/// ```
/// assert_eq!(redlease::redact_url("redis://app:s3cret@10.0.0.1:6379/2"), "redis://***@10.0.0.1:6379/2");
/// assert_eq!(redlease::redact_url("redis://10.0.0.1:6379"), "redis://10.0.0.1:6379");
/// ```
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return "<unparsable URL>".to_string();
    };
    let rest = &url[scheme_end..];
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let url = match rest[..authority_end].rfind('@') {
        Some(at) => format!("{}***@{}", &url[..scheme_end], &rest[at + 1..]),
        None => url.to_string(),
    };
    // A sentinel URL may carry the sentinels' password as a parameter.
    match url.split_once('?') {
        Some((base, query)) => {
            let params: Vec<String> = query
                .split('&')
                .map(|param| match param.split_once('=') {
                    Some((key, _)) if key.to_ascii_lowercase().contains("password") => {
                        format!("{key}=***")
                    }
                    _ => param.to_string(),
                })
                .collect();
            format!("{base}?{}", params.join("&"))
        }
        None => url,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_hides_credentials_only() {
        assert_eq!(
            redact_url("redis://127.0.0.1:6380/2"),
            "redis://127.0.0.1:6380/2"
        );
        assert_eq!(
            redact_url("redis://alice:s3cret@h:1/0"),
            "redis://***@h:1/0"
        );
        assert_eq!(redact_url("rediss://:p@ss@h:1"), "rediss://***@h:1");
        assert_eq!(redact_url("nonsense"), "<unparsable URL>");
        assert_eq!(
            redact_url("redis+sentinel://u:p@s1,s2/m?sentinel_password=sp&sentinel_username=x"),
            "redis+sentinel://***@s1,s2/m?sentinel_password=***&sentinel_username=x"
        );
    }

    #[test]
    fn server_urls_pass_through() {
        for url in [
            "redis://h:1/2",
            "rediss://u:p@h",
            "unix:///tmp/r.sock",
            "nonsense",
        ] {
            assert_eq!(
                NodeUrl::parse_reason(url),
                Ok(NodeUrl::Server(url.to_string()))
            );
        }
    }

    #[test]
    fn a_cluster_url_becomes_seed_urls_with_the_credentials() {
        let url = NodeUrl::parse_reason("redis+cluster://app:pw@a:7000,b,[::1]:7002").unwrap();
        assert_eq!(
            url,
            NodeUrl::Cluster {
                seeds: vec![
                    "redis://app:pw@a:7000".into(),
                    "redis://app:pw@b:6379".into(),
                    "redis://app:pw@[::1]:7002".into(),
                ]
            }
        );
        assert_eq!(url.describe().unwrap(), "cluster a:7000,b:6379,[::1]:7002");
        let tls = NodeUrl::parse_reason("rediss+cluster://a:7000/").unwrap();
        assert_eq!(
            tls,
            NodeUrl::Cluster {
                seeds: vec!["rediss://a:7000".into()]
            }
        );
    }

    #[test]
    fn a_sentinel_url_names_service_db_and_both_credentials() {
        let url = NodeUrl::parse_reason(
            "redis+sentinel://app:p%40ss@s1,s2:26380/mymaster/3?sentinel_password=sp",
        )
        .unwrap();
        let NodeUrl::Sentinel(s) = &url else {
            panic!("{url:?}")
        };
        assert_eq!(s.sentinels, ["s1:26379", "s2:26380"]);
        assert_eq!(s.service, "mymaster");
        assert_eq!(s.db, 3);
        assert_eq!(s.username.as_deref(), Some("app"));
        assert_eq!(s.password.as_deref(), Some("p@ss"));
        assert_eq!(s.sentinel_password.as_deref(), Some("sp"));
        assert!(!s.tls);
        assert_eq!(
            url.describe().unwrap(),
            "sentinel s1:26379,s2:26380/mymaster/3"
        );
        assert!(!format!("{s:?}").contains("p@ss"));
    }

    #[test]
    fn bad_cluster_and_sentinel_urls_say_what_is_wrong() {
        let cases = [
            ("redis+sentinel://s1:26379", "names the monitored primary"),
            ("redis+sentinel://s1/m/x", "not a number"),
            ("redis+sentinel://s1/m?foo=1", "unknown parameter `foo`"),
            ("redis+cluster://a:7000/1", "no path"),
            ("redis+cluster://a:70000", "not a port number"),
            ("redis+cluster://a:7000,,b", "empty host"),
            ("redis+cluster://[::1:7000", "without closing"),
        ];
        for (url, expected) in cases {
            let err = NodeUrl::parse_reason(url).unwrap_err();
            assert!(err.contains(expected), "{url}: {err}");
        }
    }
}
