//! What a server can do that redlease cares about, read once from what it
//! says of itself: `INFO server` (which every connection of the library
//! reads before its first request, see `server_conn`), or `HELLO`'s name
//! and version where `INFO` is refused (`doctor`). One parser, shared by
//! the library, the `redlease` command and the bench.
//!
//! Valkey keeps `redis_version:7.2.4` in `INFO` for old clients, whatever
//! its release, and says its own version in `valkey_version` (with
//! `server_name:valkey`, both from Valkey 7.2.5 on). So the Redis commands
//! a server has are judged by `redis_version`, and what only Valkey has
//! (`DELIFEQ`) by its own version.
//!
//! Parsing only: no I/O here.

use std::fmt;

/// A server's version as `major.minor.patch`; a missing or unreadable
/// minor or patch counts as 0 (`"7.2"` is 7.2.0).
///
/// ```
/// use redlease::ServerVersion;
///
/// let v: ServerVersion = "7.0.15".parse().unwrap();
/// assert_eq!(v, ServerVersion::new(7, 0, 15));
/// assert!(v < ServerVersion::new(7, 2, 0));
/// assert_eq!(v.to_string(), "7.0.15");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServerVersion {
    /// The major version: 7 in 7.2.4.
    pub major: u32,
    /// The minor version: 2 in 7.2.4.
    pub minor: u32,
    /// The patch level: 4 in 7.2.4.
    pub patch: u32,
}

impl ServerVersion {
    /// `major.minor.patch`.
    ///
    /// ```
    /// assert_eq!(redlease::ServerVersion::new(6, 2, 0).to_string(), "6.2.0");
    /// ```
    pub const fn new(major: u32, minor: u32, patch: u32) -> ServerVersion {
        ServerVersion {
            major,
            minor,
            patch,
        }
    }
}

impl fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl std::str::FromStr for ServerVersion {
    type Err = String;

    /// Reads `"7.2.4"`; only the major version must be a number.
    fn from_str(s: &str) -> Result<ServerVersion, String> {
        let mut parts = s.trim().split('.').map(|p| p.parse::<u32>().ok());
        let major = parts
            .next()
            .flatten()
            .ok_or_else(|| format!("not a version: {s:?}"))?;
        let mut next = || parts.next().flatten().unwrap_or(0);
        Ok(ServerVersion::new(major, next(), next()))
    }
}

/// The first version of Redis with each command or option redlease uses
/// where the server has it.
const SET_NX_PX: ServerVersion = ServerVersion::new(2, 6, 12);
const RESP3: ServerVersion = ServerVersion::new(6, 0, 0);
const SET_GET: ServerVersion = ServerVersion::new(6, 2, 0);
const SET_NX_GET: ServerVersion = ServerVersion::new(7, 0, 0);
const SHARDED_PUBSUB: ServerVersion = ServerVersion::new(7, 0, 0);
const WAITAOF: ServerVersion = ServerVersion::new(7, 2, 0);
/// The Redis version every Valkey release says it is compatible with.
const VALKEY_REDIS: ServerVersion = ServerVersion::new(7, 2, 4);
/// The first Valkey with `DELIFEQ`.
const VALKEY_DELIFEQ: u32 = 9;

/// What a server is and which of the commands redlease may use it has,
/// from its `INFO server` reply ([`from_info`](Self::from_info)) or its
/// name and version ([`new`](Self::new)).
///
/// ```
/// use redlease::Capabilities;
///
/// let info = "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:9.1.2\r\n";
/// let valkey = Capabilities::from_info(info).unwrap();
/// assert_eq!((valkey.server(), valkey.version()), ("valkey", "9.1.2"));
/// assert!(valkey.delifeq() && valkey.waitaof() && valkey.sharded_pubsub());
///
/// let redis = Capabilities::from_info("redis_version:7.0.15\r\n").unwrap();
/// assert!(redis.set_nx_get() && !redis.waitaof() && !redis.delifeq());
/// ```
///
/// Reading it from a live server (the library does the same on each new
/// connection):
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let nodes = redlease_testkit::RedisNodes::start(1);
/// # let url = nodes.urls()[0].clone();
/// let client = redis::Client::open(url)?;
/// let mut con = client.get_multiplexed_async_connection().await?;
/// let info: String = redis::cmd("INFO").arg("server").query_async(&mut con).await?;
/// let server = redlease::Capabilities::from_info(&info).expect("a version");
/// assert!(server.resp3()); // Redis 6.0 and later
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capabilities {
    server: String,
    version: String,
    own: Option<ServerVersion>,
    redis_version: Option<ServerVersion>,
}

impl Capabilities {
    /// A server that calls itself `server` (`redis`, `valkey`, ...) at
    /// `version` (its own), compatible with Redis `redis_version` when
    /// known (Redis: its own version, also when `None`). `HELLO` answers
    /// the first two, `INFO`'s `redis_version` the last.
    ///
    /// ```
    /// use redlease::{Capabilities, ServerVersion};
    ///
    /// let valkey = Capabilities::new("valkey", "9.1.2", None);
    /// assert!(valkey.delifeq());
    /// assert_eq!(valkey.redis_version(), None);
    /// let redis = Capabilities::new("redis", "6.2.14", None);
    /// assert_eq!(redis.redis_version(), Some(ServerVersion::new(6, 2, 14)));
    /// ```
    pub fn new(server: &str, version: &str, redis_version: Option<&str>) -> Capabilities {
        let own = version.parse().ok();
        let redis_version = match redis_version {
            Some(v) => v.parse().ok(),
            None if server == "redis" => own,
            None => None,
        };
        Capabilities {
            server: server.to_string(),
            version: version.trim().to_string(),
            own,
            redis_version,
        }
    }

    /// Reads an `INFO` reply (its `server` section is enough): the
    /// server's name from `server_name` (`redis` if absent, `valkey` where
    /// only `valkey_version` says so), its own version from
    /// `<name>_version` (or `redis_version`), and `redis_version`. `None`
    /// if it names no version.
    ///
    /// ```
    /// let old = redlease::Capabilities::from_info("# Server\r\nredis_version:6.0.9\r\n").unwrap();
    /// assert!(old.resp3() && !old.set_get());
    /// assert!(redlease::Capabilities::from_info("").is_none());
    /// ```
    pub fn from_info(info: &str) -> Option<Capabilities> {
        let field = |name: &str| {
            info.lines().find_map(|line| {
                let (key, value) = line.split_once(':')?;
                (key.trim() == name).then(|| value.trim())
            })
        };
        let server = match (field("server_name"), field("valkey_version")) {
            (Some(name), _) if !name.is_empty() => name,
            (_, Some(_)) => "valkey",
            _ => "redis",
        };
        let redis_version = field("redis_version");
        let version = field(&format!("{server}_version")).or(redis_version)?;
        Some(Capabilities::new(server, version, redis_version))
    }

    /// What the server calls itself: `redis`, `valkey`, ...
    ///
    /// ```
    /// let caps = redlease::Capabilities::new("valkey", "8.1.4", None);
    /// assert_eq!(caps.server(), "valkey");
    /// ```
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Its own version, as it wrote it (`9.1.2` for Valkey 9.1.2).
    ///
    /// ```
    /// let caps = redlease::Capabilities::new("valkey", "9.1.2", Some("7.2.4"));
    /// assert_eq!(caps.version(), "9.1.2");
    /// ```
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The Redis version it is compatible with, when known: its own for
    /// Redis, `INFO`'s `redis_version` for others (7.2.4 for every Valkey).
    ///
    /// ```
    /// use redlease::{Capabilities, ServerVersion};
    /// let caps = Capabilities::new("valkey", "9.1.2", Some("7.2.4"));
    /// assert_eq!(caps.redis_version(), Some(ServerVersion::new(7, 2, 4)));
    /// ```
    pub fn redis_version(&self) -> Option<ServerVersion> {
        self.redis_version
    }

    /// The Redis version whose commands it has: [`redis_version`], or for
    /// a Valkey that did not say, the one every Valkey says.
    ///
    /// [`redis_version`]: Self::redis_version
    fn level(&self) -> Option<ServerVersion> {
        self.redis_version
            .or_else(|| (self.server == "valkey").then_some(VALKEY_REDIS))
    }

    fn has(&self, since: ServerVersion) -> bool {
        self.level().is_some_and(|v| v >= since)
    }

    /// `SET key value NX PX ms` (Redis 2.6.12), which every lock is taken
    /// with.
    ///
    /// ```
    /// assert!(redlease::Capabilities::new("redis", "2.6.12", None).set_nx_px());
    /// ```
    pub fn set_nx_px(&self) -> bool {
        self.has(SET_NX_PX)
    }

    /// RESP3 and `HELLO` (Redis 6.0): release notifications need them.
    ///
    /// ```
    /// assert!(!redlease::Capabilities::new("redis", "5.0.7", None).resp3());
    /// ```
    pub fn resp3(&self) -> bool {
        self.has(RESP3)
    }

    /// `SET ... GET` (Redis 6.2).
    ///
    /// ```
    /// assert!(redlease::Capabilities::new("redis", "6.2.0", None).set_get());
    /// ```
    pub fn set_get(&self) -> bool {
        self.has(SET_GET)
    }

    /// `SET ... NX GET`, `NX` and `GET` together (Redis 7.0): the plain
    /// acquire.
    ///
    /// ```
    /// assert!(!redlease::Capabilities::new("redis", "6.2.14", None).set_nx_get());
    /// ```
    pub fn set_nx_get(&self) -> bool {
        self.has(SET_NX_GET)
    }

    /// Sharded pub/sub, `SPUBLISH` and `SSUBSCRIBE` (Redis 7.0): release
    /// notifications on a cluster.
    ///
    /// ```
    /// assert!(redlease::Capabilities::new("redis", "7.0.15", None).sharded_pubsub());
    /// ```
    pub fn sharded_pubsub(&self) -> bool {
        self.has(SHARDED_PUBSUB)
    }

    /// `WAITAOF` (Redis 7.2, every Valkey): durability with `fsync`.
    ///
    /// ```
    /// assert!(!redlease::Capabilities::new("redis", "7.0.15", None).waitaof());
    /// ```
    pub fn waitaof(&self) -> bool {
        self.has(WAITAOF)
    }

    /// `DELIFEQ key value` (Valkey 9.0): the native release.
    ///
    /// ```
    /// assert!(!redlease::Capabilities::new("valkey", "8.1.4", None).delifeq());
    /// ```
    pub fn delifeq(&self) -> bool {
        self.server == "valkey" && self.own.is_some_and(|v| v.major >= VALKEY_DELIFEQ)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `INFO server` as each server wrote it (abridged after `os`; the
    /// Redis 7.0.15 and Valkey 9.1.2 replies were read from the servers
    /// the tests run, the others follow those versions' layout).
    const REDIS_6_0: &str = "# Server\r\nredis_version:6.0.9\r\nredis_git_sha1:00000000\r\n\
        redis_git_dirty:0\r\nredis_build_id:9e0d9d8b6b3d2a47\r\nredis_mode:standalone\r\n\
        os:Linux 6.1.0 x86_64\r\narch_bits:64\r\nrun_id:5b1c2e0e9f\r\n";
    const REDIS_6_2: &str = "# Server\r\nredis_version:6.2.14\r\nredis_git_sha1:00000000\r\n\
        redis_git_dirty:0\r\nredis_build_id:6a1f0dbd4c2a3f7e\r\nredis_mode:standalone\r\n\
        os:Linux 6.1.0 x86_64\r\narch_bits:64\r\nmonotonic_clock:POSIX clock_gettime\r\n";
    const REDIS_7_0: &str = "# Server\r\nredis_version:7.0.15\r\nredis_git_sha1:00000000\r\n\
        redis_git_dirty:0\r\nredis_build_id:ae4d7c971a948f0\r\nredis_mode:standalone\r\n\
        os:Linux 6.18.44-fc-v657 x86_64\r\narch_bits:64\r\n\
        monotonic_clock:POSIX clock_gettime\r\nrun_id:a6fffad7567ec6caf2f6866a1a41345c9351a1c7\r\n";
    const REDIS_7_2: &str = "# Server\r\nredis_version:7.2.5\r\nredis_git_sha1:00000000\r\n\
        redis_git_dirty:0\r\nredis_build_id:d2b0e3e8f9e1c0a4\r\nredis_mode:cluster\r\n\
        os:Linux 6.1.0 x86_64\r\narch_bits:64\r\nlistener0:name=tcp,bind=*,bind=-::*,port=6379\r\n";
    const REDIS_8: &str = "# Server\r\nredis_version:8.2.1\r\nredis_git_sha1:00000000\r\n\
        redis_git_dirty:1\r\nredis_build_id:4ac8d1a2e5b7f903\r\nredis_mode:standalone\r\n\
        os:Linux 6.1.0 x86_64\r\narch_bits:64\r\n";
    const VALKEY_7_2: &str = "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\n\
        valkey_version:7.2.5\r\nredis_git_sha1:00000000\r\nredis_git_dirty:0\r\n\
        redis_mode:standalone\r\nos:Linux 6.1.0 x86_64\r\n";
    const VALKEY_8_1: &str = "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\n\
        valkey_version:8.1.4\r\nvalkey_release_stage:ga\r\nredis_git_sha1:00000000\r\n\
        server_mode:standalone\r\nos:Linux 6.1.0 x86_64\r\n";
    const VALKEY_9: &str = "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\n\
        valkey_version:9.1.2\r\nvalkey_release_stage:ga\r\nredis_git_sha1:00000000\r\n\
        redis_git_dirty:1\r\nredis_build_id:1536df31c0395150\r\nserver_mode:standalone\r\n\
        os:Linux 6.18.44-fc-v657 x86_64\r\narch_bits:64\r\n";

    /// (server, version, resp3, set_get, set_nx_get, sharded, waitaof, delifeq)
    type Row = (&'static str, &'static str, [bool; 6]);

    #[test]
    fn each_server_has_what_its_version_brought() {
        let table: [(&str, Row); 8] = [
            (
                REDIS_6_0,
                ("redis", "6.0.9", [true, false, false, false, false, false]),
            ),
            (
                REDIS_6_2,
                ("redis", "6.2.14", [true, true, false, false, false, false]),
            ),
            (
                REDIS_7_0,
                ("redis", "7.0.15", [true, true, true, true, false, false]),
            ),
            (
                REDIS_7_2,
                ("redis", "7.2.5", [true, true, true, true, true, false]),
            ),
            (
                REDIS_8,
                ("redis", "8.2.1", [true, true, true, true, true, false]),
            ),
            (
                VALKEY_7_2,
                ("valkey", "7.2.5", [true, true, true, true, true, false]),
            ),
            (
                VALKEY_8_1,
                ("valkey", "8.1.4", [true, true, true, true, true, false]),
            ),
            (
                VALKEY_9,
                ("valkey", "9.1.2", [true, true, true, true, true, true]),
            ),
        ];
        for (info, (server, version, has)) in table {
            let caps = Capabilities::from_info(info).unwrap();
            assert_eq!((caps.server(), caps.version()), (server, version), "{info}");
            let got = [
                caps.resp3(),
                caps.set_get(),
                caps.set_nx_get(),
                caps.sharded_pubsub(),
                caps.waitaof(),
                caps.delifeq(),
            ];
            assert_eq!(got, has, "{server} {version}");
            assert!(caps.set_nx_px());
        }
    }

    #[test]
    fn valkey_is_judged_by_its_redis_version_and_its_own() {
        let caps = Capabilities::from_info(VALKEY_9).unwrap();
        assert_eq!(caps.redis_version(), Some(ServerVersion::new(7, 2, 4)));
        // A future Valkey.
        let ten = VALKEY_9.replace("valkey_version:9.1.2", "valkey_version:10.0.0");
        assert!(Capabilities::from_info(&ten).unwrap().delifeq());
        // Only valkey_version, no server_name: Valkey all the same.
        let unnamed = VALKEY_9.replace("server_name:valkey\r\n", "");
        let caps = Capabilities::from_info(&unnamed).unwrap();
        assert_eq!((caps.server(), caps.version()), ("valkey", "9.1.2"));
        // An empty version: no DELIFEQ.
        let empty = VALKEY_9.replace("valkey_version:9.1.2", "valkey_version:");
        assert!(!Capabilities::from_info(&empty).unwrap().delifeq());
        // Redis says only redis_version, whatever it is.
        let redis_9 = Capabilities::from_info("# Server\r\nredis_version:9.0.0\r\n").unwrap();
        assert!(!redis_9.delifeq());
    }

    #[test]
    fn a_name_and_version_from_hello() {
        let valkey = Capabilities::new("valkey", "8.1.4", None);
        assert!(!valkey.delifeq());
        assert!(valkey.waitaof(), "every Valkey has Redis 7.2.4's commands");
        assert_eq!(valkey.redis_version(), None);
        let told = Capabilities::new("valkey", "9.1.2", Some("7.2.4"));
        assert_eq!(told.redis_version(), Some(ServerVersion::new(7, 2, 4)));
        assert!(told.delifeq());
        let old = Capabilities::new("redis", "5.0.7", None);
        assert!(!old.resp3() && old.set_nx_px());
        let unknown = Capabilities::new("keydb", "x", None);
        assert!(!unknown.resp3() && !unknown.set_nx_px());
    }

    #[test]
    fn no_version_no_capabilities() {
        assert_eq!(Capabilities::from_info(""), None);
        assert_eq!(Capabilities::from_info("# Server\r\nrun_id:abc\r\n"), None);
        let garbled = Capabilities::from_info("redis_version:unknown\r\n").unwrap();
        assert_eq!(garbled.redis_version(), None);
        assert!(!garbled.set_nx_px());
    }

    #[test]
    fn versions_read_like_the_servers_write_them() {
        let v = |s: &str| s.parse::<ServerVersion>().ok();
        assert_eq!(v("7.0.15"), Some(ServerVersion::new(7, 0, 15)));
        assert_eq!(v("7.2"), Some(ServerVersion::new(7, 2, 0)));
        assert_eq!(v(" 9 "), Some(ServerVersion::new(9, 0, 0)));
        assert_eq!(v("255.255.255"), Some(ServerVersion::new(255, 255, 255)));
        assert_eq!(v(""), None);
        assert_eq!(v("x.1"), None);
        assert!(ServerVersion::new(6, 2, 0) < ServerVersion::new(7, 0, 0));
        assert!(ServerVersion::new(2, 6, 12) > ServerVersion::new(2, 6, 9));
    }
}
