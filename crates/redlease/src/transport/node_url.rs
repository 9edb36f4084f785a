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
    pub fn parse(url: &str) -> Result<NodeUrl, crate::core::error::Error> {
        NodeUrl::parse_reason(url).map_err(|reason| {
            crate::core::error::Error::invalid("urls", format!("{}: {reason}", redact_url(url)))
        })
    }

    /// [`parse`](Self::parse), with the reason alone as the error.
    pub(crate) fn parse_reason(url: &str) -> Result<NodeUrl, String> {
        let Some((scheme, rest)) = url.split_once("://") else {
            // `unix:/path` is a URL too (redis-rs takes it).
            let socket = url.split_once(":/").is_some_and(|(scheme, _)| {
                SERVER_SCHEMES.contains(&scheme) && scheme.ends_with("unix")
            });
            return match socket {
                true => Ok(NodeUrl::Server(url.to_string())),
                false => Err(without_scheme(url)),
            };
        };
        let (tls, kind) = match scheme {
            "redis+cluster" => (false, Kind::Cluster),
            "rediss+cluster" => (true, Kind::Cluster),
            "redis+sentinel" => (false, Kind::Sentinel),
            "rediss+sentinel" => (true, Kind::Sentinel),
            _ => {
                check_server(scheme, rest)?;
                return Ok(NodeUrl::Server(url.to_string()));
            }
        };
        if credentials_end(rest).is_some() && !rest.split('/').next().unwrap_or("").contains('@') {
            return Err(PERCENT_ENCODE.to_string());
        }
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

    /// Whether the node is reached over TLS: `rediss://` (or `valkeys://`),
    /// `rediss+cluster://` or `rediss+sentinel://`. TLS settings
    /// ([`TlsConfig`](crate::TlsConfig)) apply to these nodes only.
    ///
    /// ```
    /// use redlease::NodeUrl;
    ///
    /// assert!(NodeUrl::parse("rediss+cluster://a:7000,b:7001")?.uses_tls());
    /// assert!(NodeUrl::parse("rediss+sentinel://s1/locks")?.uses_tls());
    /// assert!(!NodeUrl::parse("redis://a:6379")?.uses_tls());
    /// # Ok::<(), redlease::Error>(())
    /// ```
    pub fn uses_tls(&self) -> bool {
        match self {
            NodeUrl::Server(url) => is_tls_server_url(url),
            NodeUrl::Cluster { seeds } => seeds.iter().any(|s| is_tls_server_url(s)),
            NodeUrl::Sentinel(s) => s.tls,
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

impl NodeUrl {
    /// Splits a comma-separated list of node URLs, as `REDLEASE_NODES` and
    /// the `redlease` command's `--nodes` take it, and checks each URL
    /// (no I/O). A comma followed by a scheme (`xxx://`, spaces allowed
    /// before it) starts a new URL; any other comma belongs to the URL
    /// before it: a cluster's or the sentinels' hosts, or a password.
    /// Spaces around the parts and empty parts are dropped. The error names
    /// the node without its password, and says the rule when a host list
    /// was given without a cluster or sentinel scheme.
    ///
    /// ```
    /// let urls = redlease::NodeUrl::split_list(
    ///     "redis+cluster://a:7000,b:7001, c:7002,redis://d:6379",
    /// )?;
    /// assert_eq!(urls, ["redis+cluster://a:7000,b:7001,c:7002", "redis://d:6379"]);
    /// assert!(redlease::NodeUrl::split_list("redis://a:1,b:2").is_err());
    /// # Ok::<(), redlease::Error>(())
    /// ```
    pub fn split_list(list: &str) -> Result<Vec<String>, crate::core::error::Error> {
        let mut urls: Vec<String> = Vec::new();
        for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match urls.last_mut() {
                Some(url) if !has_scheme(part) => {
                    url.push(',');
                    url.push_str(part);
                }
                _ => urls.push(part.to_string()),
            }
        }
        if urls.is_empty() {
            return Err(crate::core::error::Error::invalid(
                "urls",
                "no node URL given",
            ));
        }
        for (i, url) in urls.iter().enumerate() {
            let host_list =
                url.contains(',') && !url.contains("+cluster://") && !url.contains("+sentinel://");
            match crate::core::node_error::NodeId::from_url(i, url) {
                Ok(_) => {}
                Err(crate::core::error::Error::InvalidInput { field, reason }) if host_list => {
                    return Err(crate::core::error::Error::InvalidInput {
                        field,
                        reason: format!(
                            "{reason} (a comma starts a new node only before a scheme: write \
                             redis://a:6379,redis://b:6379; a cluster is \
                             redis+cluster://a:6379,b:6379)"
                        ),
                    })
                }
                Err(e) => return Err(e),
            }
        }
        Ok(urls)
    }
}

/// Whether `text` starts with a URL scheme and `://`.
fn has_scheme(text: &str) -> bool {
    text.split_once("://").is_some_and(|(scheme, _)| {
        scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    })
}

enum Kind {
    Cluster,
    Sentinel,
}

/// Whether one server's URL asks for TLS (`rediss://`, `valkeys://`).
pub(crate) fn is_tls_server_url(url: &str) -> bool {
    url.split_once("://")
        .is_some_and(|(scheme, _)| matches!(scheme, "rediss" | "valkeys"))
}

/// The schemes of one server's URL that redis-rs takes.
const SERVER_SCHEMES: [&str; 7] = [
    "redis",
    "rediss",
    "valkey",
    "valkeys",
    "redis+unix",
    "valkey+unix",
    "unix",
];

/// The forms a node URL takes, for errors.
const FORMS: &str = "redis://HOST:PORT, rediss://HOST:PORT (TLS), redis+unix:///PATH, \
                     redis+cluster://HOST:PORT,... or redis+sentinel://HOST:PORT,.../SERVICE";

/// Why text without `://` is no node URL, and what was probably meant:
/// `127.0.0.1:7300`, `localhost` or `redis:/host` are typed for
/// `redis://...` often enough. Never shows a password.
fn without_scheme(text: &str) -> String {
    if text.trim().is_empty() {
        return format!("an empty URL; write one of {FORMS}");
    }
    // `redis:/host` or `redis:host`: a known scheme short of its `//`.
    if let Some((scheme, rest)) = text.split_once(':') {
        let all = [
            "redis+cluster",
            "rediss+cluster",
            "redis+sentinel",
            "rediss+sentinel",
        ];
        if SERVER_SCHEMES.contains(&scheme) || all.contains(&scheme) {
            let rest = rest.trim_start_matches('/');
            return format!(
                "`{scheme}:` must be followed by `//`: write {}",
                redact_url(&format!("{scheme}://{rest}"))
            );
        }
    }
    if text.starts_with('/') {
        return format!("no scheme: for a Unix socket write redis+unix://{text}");
    }
    format!(
        "no scheme: write {} (or rediss:// for TLS)",
        redact_url(&format!("redis://{text}"))
    )
}

/// Checks what redis-rs would refuse with a bare "did not parse" in a
/// server URL of `scheme` (`rest` follows the `://`): an unknown scheme,
/// no host, a port that is not one.
fn check_server(scheme: &str, rest: &str) -> Result<(), String> {
    if !SERVER_SCHEMES.contains(&scheme) {
        let instead = match scheme {
            "http" | "https" | "tcp" => {
                let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
                let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
                format!("; a Redis node is redis://{host}")
            }
            _ => String::new(),
        };
        return Err(format!(
            "`{scheme}://` is no Redis scheme{instead}; use one of {FORMS}"
        ));
    }
    if scheme.ends_with("unix") {
        return Ok(());
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if !authority.contains('@') && credentials_end(rest).is_some() {
        // Shown, the part before the `@` would show the password.
        return Err(PERCENT_ENCODE.to_string());
    }
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if host.is_empty() || host.starts_with(':') {
        return Err(format!("no host: write {scheme}://HOST:PORT"));
    }
    host_port(host, 6379).map(drop)
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

/// Why a URL whose `@` comes after a `/`, `?` or `#` is refused (the
/// message cannot show the part before the `@`: the password).
const PERCENT_ENCODE: &str = "a `/`, `?` or `#` before the `@`: percent-encode it in the user \
                              name or password (%2F, %3F, %23)";

/// Where the credentials of `rest` (a URL after its `://`) end: its last
/// `@` before the query. Not only within the authority: a password with
/// an unencoded `/` (base64 has them) puts its tail after one, and must
/// not be shown either.
fn credentials_end(rest: &str) -> Option<usize> {
    let before_query = rest.split('?').next().unwrap_or_default();
    before_query.rfind('@')
}

/// A Redis URL fit to print: any `user:password@` becomes `***@`.
///
/// Text that is no URL is shown as it is, but for anything up to an `@`.
///
/// ```
/// assert_eq!(redlease::redact_url("redis://app:s3cret@10.0.0.1:6379/2"), "redis://***@10.0.0.1:6379/2");
/// assert_eq!(redlease::redact_url("redis://10.0.0.1:6379"), "redis://10.0.0.1:6379");
/// assert_eq!(redlease::redact_url("app:s3cret@10.0.0.1:6379"), "***@10.0.0.1:6379");
/// ```
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        // Not a URL, but what was typed: without what may be credentials.
        return match url.rsplit_once('@') {
            Some((_, host)) => format!("***@{host}"),
            None => url.to_string(),
        };
    };
    let rest = &url[scheme_end..];
    let url = match credentials_end(rest) {
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
        assert_eq!(redact_url("nonsense"), "nonsense");
        assert_eq!(redact_url("u:hunter2@h:1"), "***@h:1");
        assert_eq!(redact_url("redis://u:hun/ter2@h:1/0"), "redis://***@h:1/0");
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
            "redis+unix:///tmp/r.sock?db=1",
            "unix:/tmp/r.sock",
            "valkey://[::1]:7000",
            "redis://h",
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
    fn common_typos_say_what_to_write() {
        let cases = [
            ("127.0.0.1:7300", "no scheme: write redis://127.0.0.1:7300"),
            ("localhost", "no scheme: write redis://localhost"),
            ("u:hunter2@h:1", "write redis://***@h:1"),
            ("/run/redis.sock", "redis+unix:///run/redis.sock"),
            (
                "redis:/host:1",
                "`redis:` must be followed by `//`: write redis://host:1",
            ),
            ("redis:host", "write redis://host"),
            ("rediss:/u:hunter2@h", "write rediss://***@h"),
            (
                "http://u:hunter2@h:1/x",
                "no Redis scheme; a Redis node is redis://h:1",
            ),
            ("tcp://h:1", "a Redis node is redis://h:1"),
            ("mongodb://h", "`mongodb://` is no Redis scheme; use one of"),
            (
                "redis://h:99999",
                "the port in `h:99999` is not a port number",
            ),
            ("redis://:hunter2@h:x", "the port in `h:x`"),
            ("redis://u:hun/ter2@h:1", "percent-encode"),
            ("redis://", "no host"),
            ("redis://:6379", "no host"),
            ("", "an empty URL"),
        ];
        for (url, expected) in cases {
            let err = NodeUrl::parse_reason(url).unwrap_err();
            assert!(err.contains(expected), "{url}: {err}");
            assert!(!err.contains("hunter2"), "{url}: {err}");
        }
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
            ("redis+cluster://u:hun/ter2@a:7000", "percent-encode"),
            ("redis+sentinel://u:hun/ter2@s1/m", "percent-encode"),
        ];
        for (url, expected) in cases {
            let err = NodeUrl::parse_reason(url).unwrap_err();
            assert!(err.contains(expected), "{url}: {err}");
        }
    }
}
