//! A network namespace of a thread's own, on loopback only, in which
//! nftables makes real network faults: random packet loss, partitions of
//! ports, one direction dropped, and healing.
//!
//! [`Netns::enter`] moves the calling thread into a new, empty network
//! namespace (`unshare(CLONE_NEWNET)`), whose only interface is its own
//! `lo`, brought up. Namespaces are per thread on Linux: what the thread
//! starts afterwards lives in the namespace with it, and nothing else of
//! the process does:
//!
//! - sockets it opens (127.0.0.1 there is not the host's 127.0.0.1: the
//!   host's servers, 127.0.0.1:6379 among them, are out of reach, and
//!   nothing outside reaches in);
//! - threads it spawns, and so Tokio runtimes built on it (their worker
//!   and blocking threads are spawned from it);
//! - child processes it spawns (`std::process::Command`), and the
//!   `redis-server`s the testkit starts from it ([`RedisNode`](crate::RedisNode)
//!   forks on a helper thread, but moves each server into the namespace of
//!   the thread that asked for it).
//!
//! The faults ([`Faults`], also reachable through the [`Netns`]) are
//! nftables rules in a table of the namespace's own, on its output hook
//! (every loopback packet passes it once); they add up until
//! [`heal`](Faults::heal). TCP sees real loss: segments are retransmitted
//! after the kernel's retransmission timeout (200 ms at least, doubling),
//! connection attempts after 1 s, 3 s, ... Nothing outside the namespace
//! is changed: no interface, route or rule of the host's, and no name in
//! `/run/netns`. Dropping the [`Netns`] moves the thread back where it
//! was; the namespace itself is gone with its last member (servers still
//! running in it, threads spawned in it, [`Faults`] handles), also after
//! a panic, since it has no name to delete.
//!
//! It needs Linux, root (or `CAP_SYS_ADMIN` and `CAP_NET_ADMIN`), and the
//! `ip` (iproute2) and `nft` (nftables) programs; without them
//! [`Netns::enter`] returns the reason. A test that needs a namespace
//! calls [`Netns::enter_or_skip`]: it skips loudly, printing why, or,
//! when the environment variable `REDLEASE_REQUIRE_NETNS` is `1` (as CI
//! sets it), panics with the reason.
//!
//! ```no_run
//! use redlease_testkit::{netns::Netns, RedisNode};
//!
//! let Some(ns) = Netns::enter_or_skip("my_test") else { return };
//! let node = RedisNode::start(); // inside the namespace
//! ns.loss(2.0).unwrap(); // 2 % of every loopback packet dropped
//! ns.heal().unwrap();
//! ns.partition(&[node.port()]).unwrap(); // the node cut off, both ways
//! ns.heal().unwrap();
//! ns.drop_from(&[node.port()]).unwrap(); // only its replies dropped
//! ```

use std::fmt;
use std::fs::File;
use std::io::{self, Write};
use std::marker::PhantomData;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::Arc;

use rustix::thread::{move_into_link_name_space, unshare_unsafe, LinkNameSpaceType, UnshareFlags};

/// The environment variable that turns a skipped namespace test into a
/// failure (`1`).
pub const REQUIRE_ENV: &str = "REDLEASE_REQUIRE_NETNS";

/// The nftables table the faults live in (inside the namespace).
const TABLE: &str = "redlease_faults";
/// Its chain on the output hook.
const CHAIN: &str = "out";
/// Loss is drawn per packet out of this many: 0.01 % steps.
const LOSS_SCALE: u32 = 10_000;

/// Why no namespace could be made (not root, no `nft`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable {
    reason: String,
}

impl Unavailable {
    fn new(reason: impl Into<String>) -> Self {
        Unavailable {
            reason: reason.into(),
        }
    }

    /// The reason, as [`Display`](fmt::Display) prints it after "no
    /// network namespace for faults: ".
    ///
    /// ```no_run
    /// if let Err(e) = redlease_testkit::netns::Netns::enter() {
    ///     eprintln!("skipped: {}", e.reason());
    /// }
    /// ```
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no network namespace for faults: {}", self.reason)
    }
}

impl std::error::Error for Unavailable {}

/// The calling thread's membership in a network namespace of its own (see
/// the [module docs](self)); dropping it moves the thread back to the
/// namespace it was in. Not `Send`: it belongs to the thread that entered.
/// The fault methods are those of [`Faults`], which any thread may use.
///
/// ```no_run
/// use redlease_testkit::netns::Netns;
///
/// let ns = Netns::enter().expect("root and nft");
/// // Sockets, threads and processes made from here on are inside.
/// ns.loss(30.0).unwrap();
/// drop(ns); // this thread is back in the host's namespace
/// ```
pub struct Netns {
    faults: Faults,
    /// The namespace the thread was in before.
    home: OwnedFd,
    _not_send: PhantomData<*const ()>,
}

impl fmt::Debug for Netns {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Netns")
            .field("inode", &self.faults.inode())
            .finish()
    }
}

impl Netns {
    /// Moves the calling thread into a new network namespace with `lo` up
    /// and an empty fault table, or says why it cannot.
    ///
    /// ```no_run
    /// match redlease_testkit::netns::Netns::enter() {
    ///     Ok(ns) => { /* start servers, fault them */ }
    ///     Err(e) => eprintln!("{e}"),
    /// }
    /// ```
    pub fn enter() -> Result<Netns, Unavailable> {
        let home = thread_netns()
            .map_err(|e| Unavailable::new(format!("cannot open this thread's namespace: {e}")))?;
        // SAFETY: only CLONE_NEWNET: the thread's file descriptor table and
        // filesystem context stay shared with the other threads.
        unsafe { unshare_unsafe(UnshareFlags::NEWNET) }.map_err(|e| {
            Unavailable::new(format!(
                "unshare(CLONE_NEWNET) failed: {e} (it needs root, or CAP_SYS_ADMIN)"
            ))
        })?;
        let set_up = || -> Result<Faults, Unavailable> {
            let ns = thread_netns()
                .map_err(|e| Unavailable::new(format!("cannot open the new namespace: {e}")))?;
            let faults = Faults { ns: Arc::new(ns) };
            faults
                .run("ip", &["link", "set", "lo", "up"], None)
                .map_err(|e| Unavailable::new(format!("cannot bring lo up: {e}")))?;
            faults
                .nft(&format!(
                    "add table inet {TABLE}\n\
                     add chain inet {TABLE} {CHAIN} {{ type filter hook output priority 0; policy accept; }}\n"
                ))
                .map_err(|e| Unavailable::new(format!("cannot create the fault table: {e}")))?;
            Ok(faults)
        };
        match set_up() {
            Ok(faults) => Ok(Netns {
                faults,
                home,
                _not_send: PhantomData,
            }),
            Err(e) => {
                // Back home; the empty namespace goes with its last member.
                let _ = move_into_link_name_space(home.as_fd(), Some(LinkNameSpaceType::Network));
                Err(e)
            }
        }
    }

    /// [`enter`](Self::enter) for a test named `test`: `None` after
    /// printing why the test is skipped (to stderr, past the test
    /// harness's capture), or a panic with the reason when
    /// `REDLEASE_REQUIRE_NETNS=1`.
    ///
    /// ```no_run
    /// # fn partition_heals() {
    /// let Some(ns) = redlease_testkit::netns::Netns::enter_or_skip("partition_heals") else {
    ///     return;
    /// };
    /// # }
    /// ```
    pub fn enter_or_skip(test: &str) -> Option<Netns> {
        match Netns::enter() {
            Ok(ns) => Some(ns),
            Err(e) if required() => {
                panic!("{test}: {e}, and {REQUIRE_ENV}=1 asks for one")
            }
            Err(e) => {
                // Straight to stderr: the test harness captures `eprintln!`.
                let _ = writeln!(
                    io::stderr(),
                    "SKIPPED {test}: {e} (set {REQUIRE_ENV}=1 to make this a failure instead)"
                );
                None
            }
        }
    }

    /// A handle on this namespace's faults that any thread may use (and
    /// that keeps the namespace alive).
    ///
    /// ```no_run
    /// let ns = redlease_testkit::netns::Netns::enter().unwrap();
    /// let faults = ns.faults();
    /// std::thread::spawn(move || faults.heal().unwrap());
    /// ```
    pub fn faults(&self) -> Faults {
        self.faults.clone()
    }

    /// [`Faults::loss`].
    ///
    /// ```no_run
    /// redlease_testkit::netns::Netns::enter().unwrap().loss(2.0).unwrap();
    /// ```
    pub fn loss(&self, percent: f64) -> io::Result<()> {
        self.faults.loss(percent)
    }

    /// [`Faults::loss_on`].
    ///
    /// ```no_run
    /// redlease_testkit::netns::Netns::enter().unwrap().loss_on(5.0, &[7001, 7002]).unwrap();
    /// ```
    pub fn loss_on(&self, percent: f64, ports: &[u16]) -> io::Result<()> {
        self.faults.loss_on(percent, ports)
    }

    /// [`Faults::partition`].
    ///
    /// ```no_run
    /// redlease_testkit::netns::Netns::enter().unwrap().partition(&[7001]).unwrap();
    /// ```
    pub fn partition(&self, ports: &[u16]) -> io::Result<()> {
        self.faults.partition(ports)
    }

    /// [`Faults::drop_from`].
    ///
    /// ```no_run
    /// redlease_testkit::netns::Netns::enter().unwrap().drop_from(&[7001]).unwrap();
    /// ```
    pub fn drop_from(&self, ports: &[u16]) -> io::Result<()> {
        self.faults.drop_from(ports)
    }

    /// [`Faults::drop_to`].
    ///
    /// ```no_run
    /// redlease_testkit::netns::Netns::enter().unwrap().drop_to(&[7001]).unwrap();
    /// ```
    pub fn drop_to(&self, ports: &[u16]) -> io::Result<()> {
        self.faults.drop_to(ports)
    }

    /// [`Faults::heal`].
    ///
    /// ```no_run
    /// redlease_testkit::netns::Netns::enter().unwrap().heal().unwrap();
    /// ```
    pub fn heal(&self) -> io::Result<()> {
        self.faults.heal()
    }

    /// [`Faults::dropped`].
    ///
    /// ```no_run
    /// let dropped = redlease_testkit::netns::Netns::enter().unwrap().dropped().unwrap();
    /// ```
    pub fn dropped(&self) -> io::Result<u64> {
        self.faults.dropped()
    }

    /// [`Faults::is_current`].
    ///
    /// ```no_run
    /// let ns = redlease_testkit::netns::Netns::enter().unwrap();
    /// assert!(ns.is_current());
    /// ```
    pub fn is_current(&self) -> bool {
        self.faults.is_current()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // The guard is not Send, so this is the thread that entered.
        if let Err(e) =
            move_into_link_name_space(self.home.as_fd(), Some(LinkNameSpaceType::Network))
        {
            eprintln!("redlease-testkit: could not move the thread back to its namespace: {e}");
        }
    }
}

/// The faults of one namespace: nftables rules on its output hook, which
/// add up until [`heal`](Self::heal). Cheap to clone, usable from any
/// thread (each call runs `nft` inside the namespace); keeps the namespace
/// alive while it exists.
///
/// Percentages are of packets, each drawn on its own (0.01 % steps); a
/// port matches a TCP packet whose source or destination it is (a
/// server's port: its requests and its replies). Bad input (a percentage
/// outside 0..=100, no ports) is refused with `InvalidInput` before
/// anything runs.
///
/// ```no_run
/// use redlease_testkit::netns::Netns;
///
/// let ns = Netns::enter().unwrap();
/// let faults = ns.faults();
/// faults.loss_on(2.0, &[7001]).unwrap();
/// faults.drop_from(&[7002]).unwrap(); // both at once
/// println!("{} packets dropped", faults.dropped().unwrap());
/// faults.heal().unwrap();
/// ```
#[derive(Clone)]
pub struct Faults {
    ns: Arc<OwnedFd>,
}

impl fmt::Debug for Faults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Faults")
            .field("inode", &self.inode())
            .finish()
    }
}

impl Faults {
    /// Drops `percent` % of every packet on the namespace's loopback.
    ///
    /// ```no_run
    /// redlease_testkit::netns::Netns::enter().unwrap().faults().loss(0.5).unwrap();
    /// ```
    pub fn loss(&self, percent: f64) -> io::Result<()> {
        match loss_draw(percent)? {
            Some(draw) => self.add_rules(&[draw]),
            None => Ok(()),
        }
    }

    /// Drops `percent` % of the TCP packets to and from `ports`.
    ///
    /// ```no_run
    /// redlease_testkit::netns::Netns::enter().unwrap().faults().loss_on(2.0, &[7001]).unwrap();
    /// ```
    pub fn loss_on(&self, percent: f64, ports: &[u16]) -> io::Result<()> {
        let draw = loss_draw(percent)?;
        let set = port_set(ports)?;
        let Some(draw) = draw else {
            return Ok(());
        };
        self.add_rules(&[
            format!("tcp dport {set} {draw}"),
            format!("tcp sport {set} {draw}"),
        ])
    }

    /// Cuts `ports` off: every TCP packet to or from them is dropped
    /// (connections hang, new ones are not answered; nothing is reset).
    ///
    /// ```no_run
    /// redlease_testkit::netns::Netns::enter().unwrap().faults().partition(&[7001, 7002]).unwrap();
    /// ```
    pub fn partition(&self, ports: &[u16]) -> io::Result<()> {
        let set = port_set(ports)?;
        self.add_rules(&[
            format!("tcp dport {set} counter drop"),
            format!("tcp sport {set} counter drop"),
        ])
    }

    /// Drops only the TCP packets sent from `ports`: a server's replies
    /// (and its side of the handshake) are lost while its requests arrive.
    ///
    /// ```no_run
    /// redlease_testkit::netns::Netns::enter().unwrap().faults().drop_from(&[7001]).unwrap();
    /// ```
    pub fn drop_from(&self, ports: &[u16]) -> io::Result<()> {
        let set = port_set(ports)?;
        self.add_rules(&[format!("tcp sport {set} counter drop")])
    }

    /// Drops only the TCP packets sent to `ports`: requests to a server
    /// are lost.
    ///
    /// ```no_run
    /// redlease_testkit::netns::Netns::enter().unwrap().faults().drop_to(&[7001]).unwrap();
    /// ```
    pub fn drop_to(&self, ports: &[u16]) -> io::Result<()> {
        let set = port_set(ports)?;
        self.add_rules(&[format!("tcp dport {set} counter drop")])
    }

    /// Removes every fault; held-back TCP segments get through at their
    /// next retransmission.
    ///
    /// ```no_run
    /// redlease_testkit::netns::Netns::enter().unwrap().faults().heal().unwrap();
    /// ```
    pub fn heal(&self) -> io::Result<()> {
        self.nft(&format!("flush chain inet {TABLE} {CHAIN}\n"))
    }

    /// Packets the current faults dropped so far (their rules' counters;
    /// [`heal`](Self::heal) starts over at zero).
    ///
    /// ```no_run
    /// let faults = redlease_testkit::netns::Netns::enter().unwrap().faults();
    /// assert_eq!(faults.dropped().unwrap(), 0);
    /// ```
    pub fn dropped(&self) -> io::Result<u64> {
        let listing = self.run("nft", &["list", "chain", "inet", TABLE, CHAIN], None)?;
        Ok(counted_packets(&listing))
    }

    /// Whether the calling thread is in this namespace.
    ///
    /// ```no_run
    /// let ns = redlease_testkit::netns::Netns::enter().unwrap();
    /// let faults = ns.faults();
    /// assert!(faults.is_current());
    /// drop(ns);
    /// assert!(!faults.is_current());
    /// ```
    pub fn is_current(&self) -> bool {
        match (thread_netns(), self.inode()) {
            (Ok(current), Some(ours)) => inode_of(current.as_fd()) == Some(ours),
            _ => false,
        }
    }

    /// The namespace's inode (as `readlink /proc/PID/ns/net` shows it).
    fn inode(&self) -> Option<(u64, u64)> {
        inode_of(self.ns.as_fd())
    }

    fn add_rules(&self, rules: &[String]) -> io::Result<()> {
        let script: String = rules
            .iter()
            .map(|rule| format!("add rule inet {TABLE} {CHAIN} {rule}\n"))
            .collect();
        self.nft(&script)
    }

    /// Runs an nftables script (`nft -f -`) inside the namespace.
    fn nft(&self, script: &str) -> io::Result<()> {
        self.run("nft", &["-f", "-"], Some(script.as_bytes()))
            .map(drop)
    }

    /// Runs `program` inside the namespace, whichever thread calls;
    /// its stdout, or an error with its stderr.
    fn run(&self, program: &str, args: &[&str], stdin: Option<&[u8]>) -> io::Result<String> {
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        enter_before_exec(&mut cmd, self.ns.as_raw_fd());
        let mut child = cmd.spawn().map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                io::Error::new(
                    e.kind(),
                    format!(
                        "{program} not found on PATH (Debian packages: nftables for nft, \
                         iproute2 for ip)"
                    ),
                )
            } else {
                io::Error::new(e.kind(), format!("{program}: {e}"))
            }
        })?;
        if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(input)?;
        }
        let out = child.wait_with_output()?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(io::Error::other(format!(
                "{program} {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )))
        }
    }
}

/// Whether `REDLEASE_REQUIRE_NETNS=1`.
fn required() -> bool {
    std::env::var(REQUIRE_ENV).is_ok_and(|v| v == "1")
}

/// The calling thread's network namespace, opened.
pub(crate) fn thread_netns() -> io::Result<OwnedFd> {
    Ok(File::open("/proc/thread-self/ns/net")?.into())
}

/// A namespace's identity: the device and inode of its file.
pub(crate) fn inode_of(fd: BorrowedFd<'_>) -> Option<(u64, u64)> {
    let file = File::from(fd.try_clone_to_owned().ok()?);
    let meta = file.metadata().ok()?;
    Some((meta.dev(), meta.ino()))
}

/// Moves the calling thread into the process's network namespace (its
/// main thread's), if it is elsewhere; errors are ignored (the thread
/// then stays where it is).
pub(crate) fn leave_for_process_namespace() {
    let Ok(process) = File::open("/proc/self/ns/net") else {
        return;
    };
    let here = thread_netns().ok();
    if here.as_ref().and_then(|h| inode_of(h.as_fd())) != inode_of(process.as_fd()) {
        let _ = move_into_link_name_space(process.as_fd(), Some(LinkNameSpaceType::Network));
    }
}

/// Makes `cmd`'s child join the network namespace `ns` (an open namespace
/// file, which must stay open until the child is spawned) before it execs.
pub(crate) fn enter_before_exec(cmd: &mut Command, ns: RawFd) {
    // SAFETY: setns is a plain syscall, safe between fork and exec; the fd
    // is open in the parent for the whole spawn, so the child has it too.
    // pre_exec itself has no safe form.
    unsafe {
        cmd.pre_exec(move || {
            let fd = BorrowedFd::borrow_raw(ns);
            move_into_link_name_space(fd, Some(LinkNameSpaceType::Network))?;
            Ok(())
        });
    }
}

/// The per-packet threshold out of [`LOSS_SCALE`] for `percent`, or
/// `InvalidInput`.
fn loss_threshold(percent: f64) -> io::Result<u32> {
    if !(0.0..=100.0).contains(&percent) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("a loss of {percent} %: it must be between 0 and 100"),
        ));
    }
    // In range, so the product fits: at most LOSS_SCALE.
    Ok((percent * f64::from(LOSS_SCALE) / 100.0).round() as u32)
}

/// The end of a rule that drops `percent` % of the packets it sees;
/// `None` for 0 % (no rule), `InvalidInput` outside 0..=100.
fn loss_draw(percent: f64) -> io::Result<Option<String>> {
    Ok(match loss_threshold(percent)? {
        0 => None,
        LOSS_SCALE => Some("counter drop".to_string()),
        below => Some(format!(
            "numgen random mod {LOSS_SCALE} < {below} counter drop"
        )),
    })
}

/// `{ 7001, 7002 }`, or `InvalidInput` for no ports or port 0.
fn port_set(ports: &[u16]) -> io::Result<String> {
    if ports.is_empty() || ports.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("ports {ports:?}: a fault needs at least one port, none of them 0"),
        ));
    }
    let list: Vec<String> = ports.iter().map(u16::to_string).collect();
    Ok(format!("{{ {} }}", list.join(", ")))
}

/// The sum of the `counter packets N` of an `nft list` output.
fn counted_packets(listing: &str) -> u64 {
    let words: Vec<&str> = listing.split_whitespace().collect();
    words
        .windows(3)
        .filter(|w| w[0] == "counter" && w[1] == "packets")
        .filter_map(|w| w[2].parse::<u64>().ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_input_is_refused_before_anything_runs() {
        for percent in [-1.0, 100.5, f64::NAN, f64::INFINITY] {
            let e = loss_threshold(percent).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{percent}");
        }
        assert_eq!(loss_threshold(0.0).unwrap(), 0);
        assert_eq!(loss_threshold(2.0).unwrap(), 200);
        assert_eq!(loss_threshold(0.01).unwrap(), 1);
        assert_eq!(loss_threshold(100.0).unwrap(), LOSS_SCALE);
        assert_eq!(loss_draw(0.0).unwrap(), None);
        assert_eq!(loss_draw(100.0).unwrap().unwrap(), "counter drop");
        assert!(loss_draw(2.0).unwrap().unwrap().contains("< 200 "));
        assert_eq!(
            port_set(&[]).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        assert_eq!(
            port_set(&[0, 1]).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        assert_eq!(port_set(&[7001, 7002]).unwrap(), "{ 7001, 7002 }");
    }

    #[test]
    fn counters_are_summed_from_the_listing() {
        let listing = "table inet redlease_faults {\n chain out {\n  tcp dport { 7001 } \
                       numgen random mod 10000 < 200 counter packets 12 bytes 900 drop\n  \
                       tcp sport { 7001 } counter packets 3 bytes 10 drop\n }\n}\n";
        assert_eq!(counted_packets(listing), 15);
        assert_eq!(counted_packets("table inet redlease_faults {}"), 0);
    }
}
