//! `redlease elect`: a command run while this process leads an election,
//! as `redlease run` runs one under a lock (run.rs does both: the same
//! supervision, signals, guardian and exits), the lead taken by
//! campaigning with a value that `redlease leader` shows, and resigned
//! when the command ends.

use clap::Args;

use crate::exit::{self, Exit};
use crate::run::{self, RunArgs};

#[derive(Args, Debug)]
#[command(
    // run's flags that a lead has no use for: refused (exit 2), not shown.
    mut_arg("shared", |a| a.hide(true)),
    mut_arg("permits", |a| a.hide(true)),
    mut_arg("weight", |a| a.hide(true)),
    mut_arg("allow_no_failures", |a| a.hide(true)),
    mut_arg("read_key", |a| a.hide(true)),
    mut_arg("key", |a| a.help("The election's name: every process that campaigns for the same \
        lead uses the same name (and `redlease leader --key NAME` shows who leads)")),
    mut_arg("owner", |a| a.help("Who the lead says holds it, to `redlease leader` and \
        `redlease status` (at most 128 bytes; no control character, nor | * ~ #) \
        [default: HOST:PID (COMMAND)]")),
    after_help = "\
Campaigns for the lead of the election --key names, with --value (what \
`redlease leader` shows the leader as: an address, a host name), waiting in \
line behind earlier campaigners as long as it takes (--wait D gives up \
after D, --no-wait at once), and runs the command while it leads. The lead \
is an exclusive lock on the name, kept alive as `redlease run` keeps its \
lock, and given back (resigned) when the command ends: the next campaigner \
in line then leads. The command is supervised exactly as by `redlease \
run`: signals passed on, stopped when the lead is lost or runs out (75), a \
guardian process stopping it if redlease dies (see `redlease run --help`).

The command gets REDLEASE_KEY (the election's name), REDLEASE_TERM (the \
lead's term: higher for every new leader, so a service that remembers the \
highest term it saw can refuse a deposed leader's writes), \
REDLEASE_FENCING_TOKEN (the same number), REDLEASE_FENCING_TOKENS \
(NAME=TERM) and REDLEASE_LEADER_VALUE (the --value).

One --key, held alone: --shared, --permits, --read-key and a second --key \
are refused (exit 2).

Examples:
  redlease elect --key scheduler --value \"$(hostname):8080\" -- ./scheduler
  redlease elect --key compactor --value \"$HOSTNAME\" --no-wait \\
      --conflict-exit-code 0 -- ./compact.sh    # from cron: one leader at a time
  redlease leader --key scheduler               # who leads

Exit codes: the command's status; 1 (or --conflict-exit-code) if another \
process leads (with --no-wait, or once --wait is over); 2 usage (also: \
--shared, --permits, --read-key, a second --key); 69 no quorum of nodes \
answered (with --wait, once the wait is over); 75 the lead was lost while \
the command ran; 77 the command exited 0 but the resignation was refused \
(ACL: NOPERM); 126/127 command not executable / not found; 128+N it died of \
signal N (or redlease got signal N before starting it). See `redlease \
--help`."
)]
pub struct ElectArgs {
    /// What to lead with: the value `redlease leader` shows for this
    /// leader (an address, a host name; at most 64 KiB), and the command
    /// gets as REDLEASE_LEADER_VALUE.
    #[arg(long, value_name = "VALUE")]
    value: String,

    #[command(flatten)]
    run: RunArgs,
}

impl ElectArgs {
    /// `--quiet`: also keeps the library's warnings out of stderr.
    pub fn quiet(&self) -> bool {
        self.run.quiet()
    }
}

pub async fn elect(args: ElectArgs) -> Exit {
    // Before any connection, as a bad name is.
    let len = args.value.len();
    if len > redlease::MAX_LEADER_VALUE_LEN {
        return Exit::with(
            exit::USAGE,
            format!(
                "--value is {len} bytes, longer than the longest leader value, {} bytes",
                redlease::MAX_LEADER_VALUE_LEN
            ),
        );
    }
    run::run_under(args.run, Some(args.value)).await
}
