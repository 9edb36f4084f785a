//! `redlease extend`: more time for a lock `redlease acquire` took, by its
//! handle: the library adopts the handle (which extends the lease by the
//! TTL it was taken with) and, with `--ttl`, extends it by that instead.
//! The handle stays valid: it is the same lease, with the same token.

use std::time::Duration;

use clap::Args;

use crate::duration;
use crate::exit::{self, Exit};
use crate::handle::{self, Handle};
use crate::nodes::NodesArg;

#[derive(Args, Debug)]
#[command(after_help = "\
Extends the lock `redlease acquire` took, by its handle, if the lock is \
still held with it: for --ttl from now, by default the TTL it was taken \
with. The handle stays valid (it is the same lease): extend it again, or \
release it with `redlease release --handle`. Give the same --nodes (or \
REDLEASE_NODES) as the acquire; the key prefix comes with the handle.

The handle comes from --handle, else from REDLEASE_HANDLE. It is a secret \
(whoever has it can release the lock), and command lines are visible to \
other users of the machine: prefer the variable.

Example:
  REDLEASE_HANDLE=$(redlease acquire --key deploy --ttl 5m) || exit
  export REDLEASE_HANDLE
  ./step-one.sh
  redlease extend --ttl 10m
  ./step-two.sh
  redlease release

Exit codes: 0 extended; 2 usage (no handle, or one that is not a handle); \
69 no quorum of nodes answered; 75 the handle is stale: its lock is no \
longer held (it expired, was released, or was taken over).")]
pub struct ExtendArgs {
    #[command(flatten)]
    nodes: NodesArg,

    /// The handle `redlease acquire` printed [default: $REDLEASE_HANDLE].
    #[arg(long, value_name = "HANDLE", value_parser = handle::parse)]
    handle: Option<Handle>,

    /// How long the lock is held from now [default: the TTL it was taken
    /// with].
    #[arg(long, value_name = "D", value_parser = duration::parse_positive)]
    ttl: Option<Duration>,

    /// Require N replicas to acknowledge the extension (WAIT), as `acquire
    /// --durable N` did for the lock: without, a failover may bring back
    /// the lock's earlier end (see docs/deployments.md).
    #[arg(long, value_name = "N")]
    durable: Option<u32>,

    /// How long the extension waits for the --durable replicas.
    #[arg(long, value_name = "D", default_value = "100ms", value_parser = duration::parse_positive, requires = "durable")]
    durable_timeout: Duration,

    /// Say nothing on success.
    #[arg(short, long)]
    quiet: bool,
}

impl ExtendArgs {
    /// `--quiet`: also keeps the library's warnings out of stderr.
    pub fn quiet(&self) -> bool {
        self.quiet
    }
}

pub async fn extend(args: ExtendArgs) -> Exit {
    let handle = match Handle::given(args.handle.clone()) {
        Ok(handle) => handle,
        Err(exit) => return exit,
    };
    let durability = match args.durable {
        Some(replicas) => redlease::Durability::required(replicas, args.durable_timeout),
        None => redlease::Durability::off(),
    };
    let locker = match handle.locker(&args.nodes, args.ttl, durability) {
        Ok(locker) => locker,
        Err(exit) => return exit,
    };
    let not_done = "nothing was extended";
    // Adopting extends it by the TTL it was taken with.
    let mut lease = match locker.adopt(handle.text()).await {
        Ok(lease) => lease,
        Err(e) => {
            locker.close().await;
            return handle::failed(&e, not_done);
        }
    };
    let extended = match args.ttl {
        Some(ttl) => lease.extend(ttl).await,
        None => Ok(()),
    };
    let names = handle::listed(lease.resources());
    // As asked, not the lease's validity, which the library counts
    // shorter by its drift allowance.
    let by = args
        .ttl
        .or_else(|| handle.facts().map(|f| f.ttl))
        .unwrap_or_else(|| lease.remaining());
    // Not ours to release: the handle's holder keeps it (this only takes
    // the lease off this Locker's books, with nothing sent).
    let _ = lease.export();
    locker.close().await;
    match extended {
        Err(e) => handle::failed(
            &e,
            "--ttl was not applied (taking the handle extended the lock by the TTL it was \
             taken with)",
        ),
        Ok(()) if args.quiet => Exit::code(exit::OK),
        Ok(()) => {
            eprintln!(
                "redlease: extended {names}: held for {} from now",
                duration::show(by)
            );
            Exit::code(exit::OK)
        }
    }
}
