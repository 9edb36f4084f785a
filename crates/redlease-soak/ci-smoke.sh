#!/usr/bin/env bash
# The fault-injection smoke of issue 7, for .ci/run: the mixed soak for two
# minutes (it must reach 10,000 acquisitions and 40 faults, with no
# violation), then each negative control, which the checker must flag.
# Every run prints its seed; replay a failure with the command it prints.
set -euo pipefail
cd "$(dirname "$0")/../.."

cargo build --release -q -p redlease-soak
soak="${CARGO_TARGET_DIR:-target}/release/soak"
"$soak" --scenario mixed --nodes 5 --seconds 120 --min-acquired 10000 --min-faults 40
"$soak" --scenario control-empty-restart --expect-violation
"$soak" --scenario control-sleepy-holder --expect-violation
"$soak" --scenario control-broken-release --expect-violation
