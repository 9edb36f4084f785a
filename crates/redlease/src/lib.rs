//! Distributed locks (leases) on Redis: on one Redis deployment, or as a
//! Redlock quorum over several independent ones.
//!
//! A [`Locker`] holds the nodes. [`Locker::lock`] waits for a lock,
//! [`Locker::try_lock`] tries once; both give a [`Lease`] that is valid until
//! [`Lease::valid_until`] unless extended, and is given back with
//! [`Lease::release`].
//!
//! ```no_run
//! use std::time::Duration;
//! use redlease::Locker;
//!
//! #[tokio::main]
//! async fn main() -> Result<(), redlease::Error> {
//!     let locker = Locker::builder(["redis://127.0.0.1:6379"])
//!         .ttl(Duration::from_secs(10))
//!         .build()?;
//!
//!     let lease = locker.lock("nightly-report").await?;
//!     // Only one process in the fleet runs this at a time.
//!     lease.release().await?;
//!     Ok(())
//! }
//! ```
//!
//! # The algorithm
//!
//! With `N` nodes the quorum is `N / 2 + 1` (one node: itself). To acquire:
//!
//! 1. Draw a fresh 128-bit token from the OS CSPRNG. It proves ownership;
//!    it is never logged or shown by `Debug`. (On the wire it follows the
//!    Locker's 64-bit tag; see [Waiting](#waiting-for-a-busy-lock).)
//! 2. Note `start` on the monotonic clock, then send `SET key token NX PX ttl
//!    GET` to every node at once, each request bounded by the per-node
//!    timeout. Plain commands, no script: `GET` makes a refusal name the
//!    holder (only a hash of its token is kept), and a node that refused
//!    is then asked, in a second round trip, for the holder's remaining
//!    TTL and how many processes wait. (With [fencing
//!    tokens](#fencing-tokens) or [`Durability`] on, or on a server older
//!    than Redis 7.0, the acquire is one script instead.)
//! 3. Decide as soon as a quorum said yes, or enough said no or failed that
//!    a quorum is impossible.
//! 4. With a quorum, the lease is valid until `start + ttl - drift`, where
//!    `drift = ttl × 1% + 2 ms` allows for clocks ticking at different rates.
//!    If that instant has already passed, the lease is not handed out.
//! 5. On any failure, the token is deleted from every node that may have
//!    set it (a node that timed out may have; one that refused, or that the
//!    request never reached, has not) before the error is returned.
//!
//! Release and extend run a compare-and-delete and a compare-and-`PEXPIRE`
//! script on the nodes (`EVALSHA`), so only the token's owner can touch
//! the lock; both need a
//! quorum to succeed, and an extend must also answer within the remaining
//! validity. A release counts a node that cannot hold the token (it
//! refused the acquire, or never received it) as done without asking it.
//!
//! # Waiting for a busy lock
//!
//! [`Locker::lock`] does not poll. The release script publishes on a
//! per-lock channel (`<key>:released`); a task that found the lock busy
//! queues for that lock and retries as soon as a release is announced, so a
//! released lock changes hands within a round trip or two. Per lock name and
//! node there is one subscription, shared by every waiting task of the
//! [`Locker`] and dropped when the last one leaves. Waiters of one Locker
//! take turns in arrival order, and a release wakes only the first of them:
//! no herd of retries, and a task that just released does not take the lock
//! straight back while others wait. [`Lease::release`] wakes it as soon as
//! the release is written to every node's connection, not when the release
//! is answered: its acquire queues right behind the release on the same
//! connections, so each node runs it next, and a handoff within a process
//! costs about one round trip instead of two. (Should the release be resent,
//! after a node lost its scripts, or fail, the acquire is refused and the
//! waiter is woken again when the release is answered.)
//!
//! **Timers only where a release could go unheard.** A release runs on a
//! quorum of nodes, so a waiter whose subscription is confirmed on a quorum
//! hears every release that succeeds (two quorums share a node). Such a
//! waiter looks at the lock again only when the holder's key is due to
//! expire, as its failed attempt reported (a holder that crashed announces
//! nothing), or after 30 s if that is sooner; a live holder renews its key, so a
//! waiting process looks about once per TTL. A crowd spreads even that:
//! the refusal also reports how many processes wait (the channel's
//! subscribers), and each adds a random delay so that together they look
//! about 1.5 times a second whatever their number (ten times per TTL on a
//! short one; ten waiters never spread; a count no server could have, as
//! Valkey 9.1.2 sometimes gives, is ignored); after a holder crashed,
//! the first of a big crowd finds its key gone about 1.3 s after it expired.
//! The refusal also carries a 28-bit hash of the holder's token (never the
//! token), so a waiter sleeps this long only when one owner holds the lock
//! on a quorum: contenders of a split vote undo their partial grants at
//! once, unannounced, and a waiter that met one retries at the policy's
//! delay.
//! Tasks behind the first waiter of their Locker do not look at all: the
//! first looks for them, and the next one moves up when it is done. When it
//! is done because it took the lock, the next one does not look either: its
//! Locker knows the lock is held, and until when (the new holder's
//! validity), so it waits for the release or that moment. What a crowd
//! of waiting processes costs a node is measured by the bench's
//! `waiter_load` (BENCHMARKS.md in the repository).
//!
//! **A release is published only when another Locker waits.** Tasks of one
//! Locker wake each other in-process when one of them releases, so a lock
//! handed over inside one process needs no `PUBLISH`, and publishing to
//! the Locker's own subscription was a large part of what a contended lock
//! cost Redis and the client. Every token a Locker hands out begins with a
//! 64-bit tag drawn for that Locker (the 128 random bits follow). An
//! acquire that will wait if refused, refused by a holder whose value does
//! not begin with the refusing Locker's tag, *marks* that holder: a `*`
//! appended to the lock key's value (its TTL kept), in the refusal's
//! follow-up round trip (or inside the acquire script). One that gives
//! up when refused ([`Locker::try_lock`], the last attempt of a bounded
//! wait) marks nothing: nobody listens for that release. A release
//! publishes only when it deletes a marked value; an unmarked one costs
//! Redis one comparison more than a bare compare-and-delete. Why no
//! waiter misses a release, node by node:
//! its acquire was refused there, and the follow-up marks whoever holds
//! the lock at that moment and reads that holder's TTL in the same step
//! (a script), at the latest in its retry after subscribing, which every
//! first waiter makes. So a release on that node either comes before that
//! step, which then finds the key gone (the waiter retries at once) or a
//! new holder (which it marks), or it deletes a marked value and is
//! published to the waiter's subscription. The mark lives exactly as long
//! as the holding it marks; the next holder starts unmarked, and a waiter
//! it refuses marks it again. A waiter behind a holder of its own Locker
//! marks nothing: that holder's release wakes it in-process.
//!
//! Limits of the mark: it changes the holder's value, so every script that
//! compares a value accepts a final `*`; only values in redlease's format
//! (48 hex digits, then the end or `|lineage`) are marked, never another
//! program's key. A waiter running a redlease version without marks
//! (tokens of 32 hex digits) marks nothing, so a holder of this version
//! announces its releases to it only while some other waiter marked the
//! lock; otherwise it hears nothing and looks at the holder's expiry, as
//! after an unannounced release. Holders of such a version always publish,
//! and are never marked.
//!
//! **A native release where the server has one.** Valkey 9.0 and later
//! have `DELIFEQ key value`: delete the key if it holds exactly `value`,
//! in one atomic command. Where a server has it, a release sends that
//! first; if the key held just our token (unmarked, and not a durable lock
//! bound to a lineage), that was the whole release, cheaper for the
//! server than any script. A key holding more than our token goes on
//! to the release script in a second round trip, which decides as always
//! and announces a marked release: only then, when a task of another
//! Locker waits, is the release one round trip slower. Between the two,
//! only we could delete our token, so asking twice loses nothing. Whether
//! the server has `DELIFEQ` is read from the `INFO server` reply of each
//! new connection, and believed until the command is refused (renamed
//! away, or an ACL user without `+delifeq`: one refusal per connection,
//! then the script). Not used on a Redis Cluster (its shards' versions are
//! not asked), nor yet Redis 8.4's `DELEX key IFEQ value`, the same thing
//! under another name, for want of a Redis 8.4 to test it against.
//!
//! The [`RetryPolicy`] delay (10–100 ms) is kept for a waiter that could
//! miss a release: its subscription is not (or no longer) confirmed on a
//! quorum, or its last attempt failed on node errors; and for a policy that
//! counts attempts ([`RetryPolicy::attempts`]), whose spacing the caller
//! chose. A subscription
//! connection that breaks stops counting at once, wakes the first waiter
//! of every lock (a release may have gone unheard) and subscribes again
//! every second until the node confirms; RESP3 connections (Redis 6 or
//! later) also reconnect and resubscribe by themselves. With ACLs, give
//! the user the `&<prefix>*` channel pattern (for example `&redlease:*`)
//! to get notifications; without it, releases still work and waiters poll
//! at the policy's delay.
//!
//! Limits: a release that is not announced (a plain `DEL` by an operator,
//! a holder whose ACL user may not publish, another library) costs a waiter
//! that heard nothing up to the holder's remaining TTL or 30 s. By default
//! [`Locker::lock`] gives up after 10 s ([`RetryPolicy`]); the `redlease run`
//! command waits as long as it takes unless given `--wait`. Tasks in
//! different processes compete on equal terms: turns are only kept within
//! one Locker.
//!
//! # Keeping a lease alive
//!
//! A holder need not guess a TTL: `locker.lock(name).keep_alive()` hands the
//! lease to the Locker, which renews it every third of its TTL (see
//! [`LockerBuilder::renew_fraction`]) with the rules of [`Lease::extend`],
//! until it is released or dropped. [`Lease::lost`] and [`Lease::is_lost`]
//! tell the holder as soon as the lease can no longer be trusted, and
//! always before `valid_until`; [`Lease::lost_reason`] says why
//! ([`LostReason`]). [`Locker::with_lock`] wraps it all: acquire, keep
//! alive, run the work, release, and drop the work at once if the lease is
//! lost.
//!
//! **Each lease is decided at quorum, on its own clock.** Every answer a
//! node gives about a lease moves only that node's bound for it: a node
//! that confirmed a renewal sent at `sent` holds the key until at least
//! `sent + ttl - drift` on our clock. The lease is valid until the
//! quorum-th latest of those bounds, so it is renewed the moment a quorum
//! confirmed, whatever a slow minority is doing and whatever other leases
//! shared the batch. No lease waits for a node timeout meant for another,
//! and none for the acquire path's node timeout: a renewal may wait as long
//! as the lease has left.
//!
//! **No congestion collapse.** Renewals travel in batches (leases falling
//! due within half an interval of each other go together, and fall into
//! step after a round or two, so a thousand leases on five nodes cost a few
//! round trips per node per TTL). Each node has a lane: a connection of its
//! own with at most one batch on the wire. What falls due while a batch is
//! out is coalesced into the next one instead of queueing behind it. A
//! batch not answered while any of its leases could still use the answer
//! (at least 500 ms) is abandoned with its connection, so nothing more
//! queues behind it on a stalled node; its fate stays unknown, and a later
//! confirmation from that node is trusted only as far as the shortest TTL
//! such a request carried. A batch holds at most 5,000 leases, the most
//! urgent first, so one batch cannot keep a node busy long enough to
//! starve the next. Renewals never share a connection with acquire and
//! release.
//!
//! **Lost means lost.** A lease is reported lost when so many nodes
//! answered that our token is gone that no quorum can hold it
//! ([`LostReason::Refused`]), or when its validity runs out (one drift
//! allowance early, so that a late timer still fires in time) before a
//! quorum confirmed a renewal: [`LostReason::NodeErrors`] if errors kept
//! the quorum from confirming, [`LostReason::Expired`] if nodes were silent
//! or slow. Fewer refusals take nothing back: the other nodes of a quorum
//! may just not have answered yet (a node whose yes to the acquire came
//! after the quorum's counts from the acquire's start). A lost lease never
//! comes back, even if a late answer arrives.
//!
//! **Manual extend.** [`Lease::extend`] on a kept-alive lease goes through
//! the same lanes, so on every node it is ordered with the lease's own
//! renewals; it waits for a quorum to confirm it, while other leases'
//! renewals go on. A renewal sent before the extend cannot count as
//! confirming it.
//!
//! **Settings that cannot work are refused.** [`LockerBuilder::build`]
//! refuses a TTL that leaves no validity after twice the drift allowance
//! and the node timeout, and a `renew_fraction` whose first renewal would
//! be sent after the loss point. Keeping a lease alive also needs that
//! first renewal answered within the node timeout before the loss point;
//! the acquire call checks this for the lease's own TTL, so a Locker meant
//! for short waits (a node timeout close to the TTL) still builds. A lease
//! is never handed out already lost.
//!
//! Limits: renewal needs a quorum of nodes to answer within each lease's
//! remaining validity. A majority stalled for longer than a lease's slack
//! (TTL minus the renewal interval) loses that lease, correctly: it can no
//! longer be trusted.
//!
//! # Slow and overloaded nodes
//!
//! A request the client stops waiting for is still queued on the
//! connection and still executed by Redis. So once a node owes the client
//! an answer it gave up on, new acquires, extends and fencing writes to
//! that node fail at once ([`NodeErrorKind::Unresponsive`]) instead of
//! queueing behind it; the owed request is the probe, and the node gets new
//! work again as soon as it answers (or once it is written off, eight node
//! timeouts and at least 2 s later). A stalled minority costs an acquire
//! one node timeout at most, and throughput is back to its level before
//! within about a second of the node waking. Releases are the exception:
//! they undo our own writes, are sent only to nodes that may hold the token
//! (never to one that refused it or that the request never reached), and
//! queue right behind the acquire they undo, so a node that wakes deletes
//! the key at once instead of holding it until it expires.
//!
//! # Restarts, duplicated servers and clock jumps
//!
//! A majority is only a majority if every "yes" comes from a server that
//! still remembers every lock it granted, keeps it for its whole TTL, and
//! is counted once. Three faults break that, and redlease keeps each such
//! server from voting "yes" on an acquire (its "no" still counts, and its
//! writes are still made, undone and extended as usual):
//!
//! - **A server that restarted empty** (no fsync'd persistence) would grant
//!   a lock still held by a holder whose majority included it. On every
//!   new connection (a restart always breaks the connection, so none goes
//!   unseen) redlease reads the server's `run_id` and uptime with `INFO
//!   server`. A server up for less than the
//!   [restart quarantine](LockerBuilder::restart_quarantine) (by default
//!   the TTL plus drift) casts no "yes": by the time it does, every lease
//!   it granted before the restart has run out, since its holder could not
//!   renew it without this server's key and so lost it within a TTL. The
//!   quarantine must cover the longest TTL any client of these servers
//!   uses; a lock or extend asked for with a longer TTL is refused.
//! - **A server whose wall clock steps forward** (an NTP step, a VM
//!   restored from a snapshot) expires its keys that much early. Every
//!   "yes" carries a reading of the server's clock: the new key's
//!   absolute expiry (`PEXPIRETIME`, pipelined with the `SET`), which is
//!   the server's clock when it ran the `SET` plus the TTL, to the
//!   millisecond, or `TIME` inside the acquire script. Between two
//!   readings, the server's clock may advance at most as much as our
//!   monotonic clock did from the first request's sending to the second
//!   reply's arrival, plus the drift allowance (and the readings'
//!   resolution); a server whose clock ran further is quarantined as if it
//!   had restarted ([`Quarantine::ClockJumped`]). Backward steps only make
//!   keys live longer, and are let be.
//! - **One server under two names** (`localhost:6379` and
//!   `127.0.0.1:6379`) would count twice: a lease on a quorum of names
//!   would stand on fewer servers than it seems, and survive fewer
//!   crashes. (It stays exclusive: two quorums of names always share a
//!   name.) Once the Locker knows of such a pair, every acquire fails at
//!   once with [`Error::SameServer`], which is not retryable, before
//!   anything is sent. It knows as soon as both names' connections have
//!   reached the server (each learns its server before it sends anything,
//!   so an acquire that reached them both is refused too, and undone).
//!   An acquire that reached a quorum while some name has never reached its
//!   server waits for that name's answer before granting (up to the node
//!   timeout), so a slow second name is caught too; this costs time only
//!   until every name has connected once. [`Locker::check_servers`]
//!   connects every name at start-up and finds the pair before any lock.
//!
//! A refused vote is a [`NodeErrorKind::Quarantined`] node error that says
//! why and for how long yet, so `Error::NoQuorum` tells which nodes are
//! quarantined; waiting for a lock waits the quarantine out
//! ([`Error::quarantine_wait`] says for how long), and
//! [`Locker::inspect`] shows each node's quarantine
//! ([`NodeLockState::quarantine`], [`Verdict::Quarantined`]).
//!
//! Cost: one extra round trip (`INFO server` and `TIME`, pipelined) per new
//! connection, and per lock one `PEXPIRETIME` pipelined with the acquire
//! (one integer reply for the client to read). The ACL user needs `+info`,
//! `+time` and `+pexpiretime`.
//!
//! Limits, stated plainly:
//!
//! - A **brand-new** server cannot show that it never granted a lock, so
//!   it is quarantined too: a fleet whose servers all (re)started together
//!   takes no lock for the quarantine (and for up to 2 s more: a server
//!   counts its uptime in whole wall-clock seconds, and may say 1 a few
//!   milliseconds after it started, so one second less is all that is
//!   sure), and no longer. Turn the quarantine off
//!   ([`Duration::ZERO`](std::time::Duration::ZERO)) only for servers that
//!   cannot lose an acknowledged write (`appendfsync always`) or that are
//!   kept down for longer than the largest TTL after a crash.
//! - The quarantine is **not skipped for servers that say they fsync every
//!   write**. A server's settings (`appendonly yes` and `appendfsync
//!   always` from `CONFIG GET`, or `aof_enabled:1` in `INFO persistence`)
//!   tell how the running process writes, not whether it started from its
//!   predecessor's data: an append-only file deleted or kept in a
//!   container's discarded filesystem, another machine or a fresh replica
//!   at the same address, `appendfsync` raised to `always` only now, all
//!   come back empty with those very settings. Nothing else the server
//!   reports tells them from a restart that reloaded every lock: a new
//!   `run_id` and a short uptime in both cases, and the keys it loaded say
//!   nothing either (a server that restarted empty, and one whose
//!   predecessor held no lock, load none). So every restart seen is
//!   quarantined, and turning that off is left to the operator, who knows
//!   the storage outlives the process. (Reading the settings would also
//!   need `+config`, which a least-privilege user lacks.)
//! - A clock jump is seen by a Locker that talked to the server before and
//!   after it; a Locker that first meets the server after the jump cannot
//!   tell (a restart in between resets the comparison too, but then the
//!   restart quarantine applies).
//! - A reading from `PEXPIRETIME` is of the key just set. Should it be
//!   deleted and taken again in the microseconds between the `SET` and
//!   the `PEXPIRETIME` (only a forced release or an operator can), the
//!   reading is another key's: a key gone or without expiry counts no
//!   vote; another TTL reads as a clock step, either a needless
//!   quarantine or one that hides at most a drift allowance's worth of a
//!   later jump (anything more is seen as a jump itself).
//! - On a Redis Cluster each shard is judged as a server of its own: every
//!   connection redis-rs makes to a shard (after a break, a MOVED or ASK to
//!   a new address, or a slot-map refresh) reads that server's `run_id`,
//!   uptime and clock before it carries anything, and every vote says
//!   which connection carried it, at no extra round trip. A restarted
//!   primary is quarantined with its slots only, a shard's clock jump
//!   quarantines that shard, and a cluster named twice (under other host
//!   names) is refused like one server named twice, as soon as both names
//!   reached a shard. Not covered there: a vote whose connection was
//!   replaced before its reply was judged counts as no vote, and
//!   [`Locker::check_servers`] compares only the primaries the cluster
//!   client is connected to. A failover to a replica is no restart; for
//!   what it can lose, see [`Durability`] (below).
//! - The uptime a server reports comes from its wall clock on some
//!   versions; a server restarted with a clock far ahead could look older
//!   than it is. The clock guard does not see that case (a restart resets
//!   its comparison).
//!
//! # Fencing tokens
//!
//! A lease cannot stop a holder that pauses (GC, swap, a stalled network
//! write) past its end from writing afterwards. A fencing token can: every
//! lease carries [`Lease::fencing_token`], a number larger than that of
//! every earlier acquisition of the same resource by any client. Send it
//! with each write, and let the resource reject a token lower than the
//! highest it has accepted. In SQL:
//!
//! ```sql
//! UPDATE accounts SET balance = $1, fence = $2
//!  WHERE id = $3 AND fence <= $2;  -- 0 rows: a newer holder has written
//! ```
//!
//! The `fencing` example does the same with a Redis key and a Lua script.
//!
//! Tokens are drawn only by a Locker built with
//! [`fencing(true)`](LockerBuilder::fencing); without it
//! [`Lease::fencing_token`] is `None`, no counter is kept, and a lock costs
//! Redis two plain commands per node. A resource that checks tokens must
//! only be written by holders whose Lockers draw them.
//!
//! How the tokens are made: each node keeps a counter beside the lock key,
//! in the same Redis Cluster hash slot. The acquire script bumps it in the
//! same round trip that takes the lock. With several nodes the counters may
//! differ; the token is the largest value reported by the granting quorum.
//! Every earlier token is stored on some quorum, and any two quorums share a
//! node, whose counter is therefore already at least that token: ours is
//! larger. So that the same holds for later tokens, ours must be stored on a
//! quorum too. When fewer than a quorum of the granting nodes reported that
//! very value, it is written back (`counter = max(counter, token)`) on a
//! quorum before the lease is returned, within its validity. Counters move
//! in step, so this second round trip is rare; it is never skipped when it
//! is needed.
//!
//! The argument needs a quorum of nodes that remember their counters. In
//! the configuration the restart quarantine rules out (a node without
//! fsync'd persistence restarted empty and voting at once), two holders can
//! even get the same token: fencing cannot repair a lock that has already
//! failed.
//!
//! Counters do not live forever: one that sees no acquisition for the
//! [fence expiry](LockerBuilder::fence_expiry) (10 minutes by default) is
//! deleted, and restarts from the node's clock in microseconds (cut to
//! 100 ms), which is above every earlier token. That holds as long as no
//! node's clock steps back, or differs from the other nodes' clocks, by
//! more than the fence expiry minus 100 ms.
//!
//! # Guarantees and limits
//!
//! While every assumption below holds, no two leases on the same resource
//! are valid at the same instant, and a lease that could not be made valid
//! is never returned. The assumptions:
//!
//! - **Bounded clock drift.** Each node expires keys with its own clock. The
//!   validity is cut by the drift allowance so that a node whose clock runs
//!   up to 1% fast (plus 2 ms) still holds the key until `valid_until`. A
//!   node whose clock jumps forward (an NTP step, a VM restored from
//!   snapshot) casts no vote for a Locker that sees the jump (above); run
//!   nodes with slewing time sync all the same.
//! - **A restart quarantine that covers every TTL.** A node that restarts
//!   without the keys it had casts no "yes" for the
//!   [restart quarantine](LockerBuilder::restart_quarantine), which must
//!   cover the largest TTL any client uses (above). With the quarantine
//!   off, run nodes with `appendonly yes` and `appendfsync always`, or
//!   keep a crashed node down for longer than the largest TTL in use.
//!   Replicas do not help by themselves: Redis replication is asynchronous,
//!   so a failover can lose a lock key. Use independent primaries, or ask
//!   for [`Durability`] (below).
//! - **No long pauses in the holder.** A process paused (GC, swap, SIGSTOP,
//!   a slow network write) past `valid_until` may still act on the protected
//!   resource after another client took the lock. No lock service can
//!   prevent that on its own; check [`Lease::remaining`] before each step,
//!   keep steps short against the TTL, and have the resource reject stale
//!   writers where possible.
//! - **Independent nodes.** The same server listed twice would fake a
//!   majority; the [`LockerBuilder`] rejects identical `host:port` pairs,
//!   and a server reached under two names (the same `run_id`) makes every
//!   acquire fail with [`Error::SameServer`]. Two servers that share a
//!   fate (one machine, one disk) are not told apart.
//!
//! Under faults (checked by the fault-injection suite in `redlease-soak`,
//! which kills, pauses, delays, blackholes, resets and partitions nodes in
//! the middle of a run and checks every call's history): crashes of a
//! minority of nodes, pauses up to twice the TTL, link latency beyond the
//! TTL, blackholed or reset links, replies buffered past the TTL and
//! asymmetric partitions all left the lock safe, with every call bounded
//! and every failure a typed error. A node without fsync'd persistence
//! restarted empty at once is safe with the restart quarantine (and
//! overlaps without it), and so is a node whose clock jumps forward, with
//! the clock-jump guard. One fault is not survivable by design, and the suite's
//! negative control shows it failing: a holder paused past its lease (a
//! lost update, unless the resource checks fencing tokens). See
//! GUARANTEES.md in the repository for the bounds and figures.
//!
//! Keys a node may still hold after a failed or abandoned operation always
//! carry the TTL, so the worst case of a lost reply is a lock that stays
//! taken until it expires, never one that is free while someone holds it.
//!
//! # Clusters, Sentinel and durability
//!
//! A node URL may name a Redis Cluster (`redis+cluster://a:7000,b:7001`)
//! or the primary that Sentinels name (`redis+sentinel://s1,s2/SERVICE`);
//! see [`NodeUrl`]. Either counts as one node of the quorum. A lock's key,
//! fencing counter and release channel share the resource as hash tag, so
//! they live in one slot: every command runs there (redis-rs follows MOVED and
//! ASK, so a migrating slot keeps its locks), renewal batches are split per
//! slot, and waiters use sharded pub/sub. The owed-request gate and the
//! connect backoff are kept per slot, so a dead or stalled shard costs only
//! its own slots' locks. Behind Sentinel, the connection follows the
//! sentinels to a new primary on `READONLY`, a broken connection or their
//! `+switch-master` announcement.
//!
//! A failover can hand a lock to a second client: the promoted replica may
//! never have received the key, and a deposed primary takes writes until it
//! is told to follow the new one. [`LockerBuilder::durability`] with
//! [`Durability::required`] sends `WAIT` after every write of a lease in the
//! same round trip, and a write too few replicas acknowledged does not
//! count: an acquire fails ([`NodeErrorKind::NotReplicated`]) and is undone
//! (a waiting [`Locker::lock`] tries again, as for a busy lock), a renewal
//! stays unconfirmed, so the lease runs out instead of outliving
//! its key. A durable lock is also bound to the replication lineage
//! (`master_replid`) of the server that took it: after a failover or a
//! restart that lost the data, its next renewal finds it not ours and the
//! lease is reported lost ([`LostReason::Refused`]), even if the key came
//! through with an older TTL. `WAIT` bounds what a promotion can lose; it does not make Redis
//! strongly consistent (an acknowledged write is in a replica's memory, not
//! on its disk, and a replica that did not acknowledge may be the one
//! promoted unless every replica must acknowledge). Ask for every replica:
//! behind Sentinel with two replicas, `required(1)` lost acknowledged locks
//! at every failover in the soak, `required(2)` none. What failover did to
//! held leases in our tests is in docs/deployments.md.
//!
//! # Shutdown, inspection and force release
//!
//! A [`Locker`]'s background work (renewal, release notifications, requests
//! finishing after a quorum answered) starts on the runtime of the task
//! that first needs it, and again on another runtime if that one has ended:
//! a Locker outlives a `#[tokio::test]` or a short-lived runtime. It stops
//! when the last handle on the Locker (clones and leases included) is
//! dropped. [`Locker::close`] is the orderly way out: it reports every
//! lease it holds lost ([`LostReason::Closed`]), releases them on every
//! node, waits for the background requests, stops the tasks, and makes
//! later calls return [`Error::Closed`]. [`Locker::flush`] only waits for
//! the background requests.
//!
//! [`Locker::inspect`] tells, per node, whether a lock's key exists and for
//! how long, its fencing counter and how many processes wait for it (never
//! the token); [`LockStatus::verdict`] judges it as an acquire would.
//! [`Locker::force_release`] deletes a stuck lock whoever holds it: an
//! operator's tool that breaks mutual exclusion for a holder still at work,
//! so fencing tokens must guard the resource (the counter is kept).
//!
//! # TLS
//!
//! With the `tls-rustls` feature, `rediss://host:port` nodes, and
//! `rediss+cluster://` and `rediss+sentinel://` ones (every server of the
//! cluster, the sentinels and the primary), are reached
//! over TLS (rustls; ring is installed as the process's crypto provider
//! unless the application set one). By default the server's certificate
//! is checked against the system's trust store and must name the host of
//! the URL; [`LockerBuilder::tls`] with a [`TlsConfig`] trusts a given CA
//! bundle instead, and presents a client certificate to servers that
//! require one (`tls-auth-clients yes`). Every connection of a node uses
//! it: requests, renewal lanes and the release-notification subscription.
//! A handshake that fails is [`NodeErrorKind::Tls`] on the node, with the
//! TLS library's reason (`UnknownIssuer`, `CertificateRequired`, a name
//! mismatch), within the connect timeout; on a cluster none of whose seeds
//! passes the handshake, the first seed's reason. A URL whose scheme does
//! not match the port is [`NodeErrorKind::WrongScheme`], which names the
//! scheme to use: `redis://` to a port that serves only TLS, or
//! `rediss://` to one that answers plain text (told by asking the port
//! again, in the other protocol, after the first connection failed).
//! Settings that cannot work (no TLS node, a file that is not PEM, TLS
//! without the feature) are refused by
//! [`LockerBuilder::build`]. Tested against `redis-server --tls-port` with a
//! throwaway CA, with and without client certificates, on single servers,
//! a cluster and a Sentinel set.
//!
//! # Observability
//!
//! Every operation runs in a `tracing` span at debug level:
//! `redlease.acquire` (resource, keep_alive, and when it ends `outcome`,
//! `elapsed_ms`, `fencing_token`), `redlease.extend`, `redlease.release`,
//! `redlease.wait` (each wait between attempts: `delay_ms`, `woken_by`
//! release or timer), `redlease.renewal_batch` (node, leases, outcome:
//! answered, abandoned or unsent) and `redlease.force_release` (info).
//! `outcome` is `ok` or the error's kind (`taken`, `no_quorum`, ...).
//! Node errors are trace events with the node and kind. A lost lease and
//! failing renewals are `warn!`. No span or event carries a token.
//!
//! With the `metrics` feature the library reports through the `metrics`
//! facade (install any recorder, such as a Prometheus exporter):
//! `redlease_operations_total` and `redlease_operation_seconds` (by `op`
//! and `outcome`), `redlease_node_errors_total` (by `node` and `kind`),
//! `redlease_leases_held`, `redlease_leases_lost_total` (by `reason`),
//! `redlease_renewal_round_trips_total` (by `node` and `outcome`) and
//! `redlease_renewals_total` (by `node`). Without the feature none of this
//! is compiled in.
//!
//! # Cancel safety
//!
//! Every future here can be dropped at any point. An acquire dropped
//! mid-flight deletes its token from every node in the background; a
//! waiting task that is dropped leaves its queue (and unsubscribes if it was
//! the last); a [`Lease`] dropped without `release` is released in the
//! background.

#![deny(missing_docs)]

mod api;
mod coord;
mod core;
mod protocol;
mod transport;

pub use crate::api::acquire::Acquire;
pub use crate::api::builder::LockerBuilder;
pub use crate::api::lease::Lease;
pub use crate::api::lease_handle::LeaseHandle;
pub use crate::api::locker::Locker;
pub use crate::coord::renew::RenewalStats;
pub use crate::core::durability::Durability;
pub use crate::core::error::{Error, Held, Op};
pub use crate::core::lease_state::LostReason;
pub use crate::core::lock_status::{KeyState, LockStatus, NodeLockState, NodeQuarantine, Verdict};
pub use crate::core::node_error::{NodeError, NodeErrorKind, NodeId, Quarantine};
pub use crate::core::retry::RetryPolicy;
pub use crate::core::server_code::ServerErrorCode;
pub use crate::core::validity::MAX_TTL;
pub use crate::transport::node_url::{redact_url, NodeUrl, SentinelUrl};
pub use crate::transport::tls::TlsConfig;
