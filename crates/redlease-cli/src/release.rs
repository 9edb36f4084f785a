//! `redlease release`: give back a lock `redlease acquire` took, by its
//! handle (the library's `Locker::release_handle`), or delete a stuck lock
//! whoever holds it with `--force` (`Admin::force_release`).

use clap::{ArgGroup, Args};
use redlease::Error;

use crate::errors::chain;
use crate::exit::{self, Exit};
use crate::handle::{self, Handle};
use crate::status::AdminArg;

#[derive(Args, Debug)]
#[command(
    group(ArgGroup::new("how").args(["handle", "force"]).multiple(false)),
    after_help = "\
With a handle (--handle H, or REDLEASE_HANDLE when neither --handle nor \
--force is given), releases the lock `redlease acquire` took, as its holder: \
on every node that still holds it with the handle's token, never anyone \
else's. A stale handle (its lock expired, was released already, or was \
taken over) exits 75: nothing was released, and the work done under it may \
have overlapped with another holder's. Give the same --nodes (or \
REDLEASE_NODES) as the acquire; the key prefix comes with the handle.

--force --key NAME deletes the key on every node whoever holds it, and \
wakes the processes waiting for it. A holder that is still at work is not \
told until its next renewal (up to a third of its TTL later): until then two \
holders may run. Use it for a lock whose holder is known to be dead and \
whose TTL is too long to wait out. The fencing counter (kept for locks taken \
with fencing on, as `redlease run` takes them) stays, so the next holder's \
token is still higher than the old holder's.

Examples:
  H=$(redlease acquire --key deploy --ttl 5m) || exit
  ./deploy.sh; redlease release --handle \"$H\"
  redlease status --key nightly-report      # who holds it, for how long
  redlease release --force --key nightly-report

Exit codes: 0 released (--force: deleted, or there was nothing to delete, \
on every node); 2 usage (including neither a handle nor --force, and text \
that is not a handle); 69 a node did not answer (--force: the others were \
cleared); 75 the handle is stale."
)]
pub struct ReleaseArgs {
    #[command(flatten)]
    admin: AdminArg,

    /// The lock's name, with --force.
    #[arg(long, value_name = "NAME")]
    key: Option<String>,

    /// The handle `redlease acquire` printed: release its lock, as its
    /// holder [default: $REDLEASE_HANDLE, unless --force is given].
    #[arg(
        long,
        value_name = "HANDLE",
        value_parser = handle::parse,
        conflicts_with_all = ["key", "key_prefix", "timeout"]
    )]
    handle: Option<Handle>,

    /// Delete the lock --key names whoever holds it. Without the holder's
    /// handle there is no other kind of release.
    #[arg(long, requires = "key")]
    force: bool,

    /// Say nothing on success.
    #[arg(short, long)]
    quiet: bool,
}

impl ReleaseArgs {
    /// `--quiet`: also keeps the library's warnings out of stderr.
    pub fn quiet(&self) -> bool {
        self.quiet
    }
}

pub async fn release(args: ReleaseArgs) -> Exit {
    match (&args.key, args.force) {
        (Some(name), true) => force(&args, name).await,
        (Some(_), false) => Exit::with(
            exit::USAGE,
            "only the holder can release a lock: give its handle (--handle, or \
             REDLEASE_HANDLE, from `redlease acquire`); `--force` deletes it whoever holds it \
             (read `redlease release --help` first)",
        ),
        (None, _) => by_handle(&args).await,
    }
}

/// `--handle H` (or `REDLEASE_HANDLE`): the library's `release_handle`.
async fn by_handle(args: &ReleaseArgs) -> Exit {
    let handle = match Handle::given(args.handle.clone()) {
        Ok(handle) => handle,
        Err(exit) => return exit,
    };
    let locker = match handle.locker(&args.admin.nodes, None, redlease::Durability::off()) {
        Ok(locker) => locker,
        Err(exit) => return exit,
    };
    let released = locker.release_handle(handle.text()).await;
    // Its requests to slower nodes would die with this process and leave
    // a key there until its TTL: let them finish first.
    locker.close().await;
    match released {
        Ok(()) if args.quiet => Exit::code(exit::OK),
        Ok(()) => {
            let names = handle.facts().map(|f| f.listed());
            eprintln!(
                "redlease: released {}",
                names.as_deref().unwrap_or("the handle's lock")
            );
            Exit::code(exit::OK)
        }
        Err(e) => handle::failed(&e, "nothing was released"),
    }
}

/// `--force --key NAME`: `Admin::force_release`.
async fn force(args: &ReleaseArgs, name: &str) -> Exit {
    let (urls, locker) = match args.admin.locker() {
        Ok(made) => made,
        Err(exit) => return exit,
    };
    let key = locker.admin().key(name);
    match locker.admin().force_release(name).await {
        Ok(0) => {
            let nodes = match urls.len() {
                1 => "its node".to_string(),
                n => format!("any of the {n} nodes"),
            };
            if !args.quiet {
                println!("lock {name:?} (key {key}) was not held on {nodes}: nothing was deleted");
            }
            Exit::code(exit::OK)
        }
        Ok(deleted) => {
            if !args.quiet {
                println!(
                    "force-released lock {:?} (key {key}): a key was deleted on {deleted} of {} \
                     node{}; any fencing counter is kept",
                    name,
                    urls.len(),
                    if urls.len() == 1 { "" } else { "s" }
                );
            }
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
