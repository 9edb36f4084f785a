//! `redlease acquire`: take a lock and hand it to the shell as a handle on
//! stdout, for a script whose steps run under it; `redlease extend` and
//! `redlease release --handle` continue it. Nothing renews it meanwhile:
//! it is held until its TTL unless extended or released.

use std::io::Write;
use std::time::{Duration, Instant};

use clap::Args;

use crate::duration;
use crate::errors::chain;
use crate::exit::{self, Exit};
use crate::signals::Signals;
use crate::take::{check_servers, TakeArgs, Taker};

#[derive(Args, Debug)]
#[command(
    mut_arg("ttl", |ttl| ttl
        .default_value("1m")
        .help("How long the lock is held: nothing renews it, so until then unless \
               `redlease extend` extends it or `redlease release --handle` releases it")),
    after_help = "\
Prints the lock's handle on stdout, and nothing else there: a secret like \
the lease's token (whoever has it can release the lock), for `redlease \
extend --handle H` and `redlease release --handle H`, or REDLEASE_HANDLE \
for both. Keep it out of logs, and prefer the variable to --handle on a \
machine others use (command lines are visible to them). The handle works \
with the same --nodes (or REDLEASE_NODES); it holds the key prefix, TTL and \
fencing tokens itself.

With --key given more than once, every one of the locks is taken at once, \
or none, as a writer (not with --shared or --permits); one handle holds \
them all. --shared and --permits N take a read hold or a permit, as for \
`redlease run`.

Example:
  REDLEASE_HANDLE=$(redlease acquire --key deploy --ttl 5m) || exit
  export REDLEASE_HANDLE
  ./step-one.sh
  redlease extend --ttl 5m         # more time for the next step
  ./step-two.sh
  redlease release

Exit codes: 0 acquired (the handle is on stdout); 1 (or \
--conflict-exit-code) the lock is held elsewhere (all N permits held); 2 \
usage (also: --durable N with too few nodes that have N replicas); 69 no \
quorum of nodes answered, or too few vote yet (their restart quarantine); \
128+N a signal ended the wait. See `redlease --help`.")]
pub struct AcquireArgs {
    #[command(flatten)]
    take: TakeArgs,
}

impl AcquireArgs {
    /// `--quiet`: also keeps the library's warnings out of stderr.
    pub fn quiet(&self) -> bool {
        self.take.quiet
    }
}

pub async fn acquire(args: AcquireArgs) -> Exit {
    let take = &args.take;
    let want = match take.want() {
        Ok(want) => want,
        Err(exit) => return exit,
    };
    // Before any lock I/O: a signal while waiting ends the wait, with any
    // attempt in flight undone, instead of killing redlease mid-way.
    let mut signals = match Signals::install_or_exit() {
        Ok(s) => s,
        Err(exit) => return exit,
    };
    let locker = match take.locker(&want, "redlease acquire") {
        Ok(locker) => locker,
        Err(exit) => return exit,
    };
    if let Err(exit) = check_servers(&locker).await {
        return exit;
    }
    let started = Instant::now();
    let mut first_try = Duration::ZERO;
    let taken = take
        .take(
            &locker,
            &want,
            false,
            &mut signals,
            &mut first_try,
            Taker::Acquire,
        )
        .await;
    let lease = match taken {
        Ok(lease) => lease,
        Err(exit) => return exit,
    };
    tracing::info!(
        key = %want.listed(),
        hold = ?want.hold,
        fencing_token = ?lease.fencing_token(),
        waited = %duration::show(started.elapsed()),
        "took the lock; printing its handle"
    );
    let handle = lease.export();
    let printed = {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{handle}").and_then(|()| out.flush())
    };
    if let Err(e) = printed {
        // Nobody has the handle: the lock would stay held for its TTL.
        let released = locker.release_handle(&handle).await;
        locker.close().await;
        return Exit::with(
            exit::INTERNAL,
            format!(
                "cannot print the handle: {}; {}",
                chain(&e),
                match released {
                    Ok(()) => "the lock was released".to_string(),
                    Err(e) => format!("the lock stays held until its TTL: {}", chain(&e)),
                }
            ),
        );
    }
    // The acquire's requests to slower nodes would die with this process
    // and leave the lock on fewer nodes: let them finish first.
    locker.close().await;
    Exit::code(exit::OK)
}
