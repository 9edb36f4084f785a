//! `redlease release --force`: delete a stuck lock whoever holds it, with
//! the library's `Admin::force_release`.

use clap::Args;
use redlease::Error;

use crate::errors::chain;
use crate::exit::{self, Exit};
use crate::status::LockArg;

#[derive(Args, Debug)]
#[command(after_help = "\
A lock is normally released by its holder, whose secret token alone can \
delete it. --force deletes the key on every node whoever holds it, and \
wakes the processes waiting for it. A holder that is still at work is not \
told until its next renewal (up to a third of its TTL later): until then two \
holders may run. Use it for a lock whose holder is known to be dead and \
whose TTL is too long to wait out. The fencing counter (kept for locks taken \
with fencing on, as `redlease run` takes them) stays, so the next holder's \
token is still higher than the old holder's.

Example:
  redlease status --key nightly-report      # who holds it, for how long
  redlease release --force --key nightly-report

Exit codes: 0 deleted (or there was nothing to delete) on every node; 2 \
usage (including a missing --force); 69 a node did not answer (the others \
were cleared).")]
pub struct ReleaseArgs {
    #[command(flatten)]
    lock: LockArg,

    /// Delete the lock whoever holds it. Required: without the holder's
    /// token there is no other kind of release.
    #[arg(long)]
    force: bool,
}

pub async fn release(args: ReleaseArgs) -> Exit {
    if !args.force {
        return Exit::with(
            exit::USAGE,
            "only the holder can release a lock; `--force` deletes it whoever holds it \
             (read `redlease release --help` first)",
        );
    }
    let (urls, locker) = match args.lock.locker() {
        Ok(made) => made,
        Err(exit) => return exit,
    };
    let name = args.lock.name();
    let key = locker.admin().key(name);
    match locker.admin().force_release(name).await {
        Ok(0) => {
            let nodes = match urls.len() {
                1 => "its node".to_string(),
                n => format!("any of the {n} nodes"),
            };
            println!("lock {name:?} (key {key}) was not held on {nodes}: nothing was deleted");
            Exit::code(exit::OK)
        }
        Ok(deleted) => {
            println!(
                "force-released lock {:?} (key {key}): a key was deleted on {deleted} of {} \
                 node{}; any fencing counter is kept",
                name,
                urls.len(),
                if urls.len() == 1 { "" } else { "s" }
            );
            Exit::code(exit::OK)
        }
        Err(e @ Error::InvalidInput { .. }) => Exit::with(exit::USAGE, chain(&e)),
        Err(e @ Error::NoQuorum { .. }) => Exit::with(
            exit::UNAVAILABLE,
            format!(
                "{}; the nodes that answered were cleared, run it again once the others are back",
                chain(&e)
            ),
        ),
        Err(e) => Exit::with(exit::INTERNAL, chain(&e)),
    }
}
