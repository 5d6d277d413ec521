#!/usr/bin/env bash
# Benchmark: instructions per byte of the log forensics (the example `logs` of crates/logs, `--quiet`), counted by
# valgrind's callgrind, so the figure does not depend on the machine's load.
#
#   bench/logs_instructions.sh [LOGS_BIN]
#
# Two inputs, as bench/logs.sh builds them: the real fixtures of crates/logs/tests/data repeated 110 and 330 times
# (5.3 and 15.8 MB), and the crash-dense corpus tests/data/logs-corpus repeated 57 and 171 times. The marginal cost
# (Ir(large) - Ir(small)) / (bytes(large) - bytes(small)) leaves out start-up and the report.
# LOGS_BIN=path (or the first argument) times that binary instead of building the example.
set -euo pipefail
cd "$(dirname "$0")/.."
LOGS_BIN="${1:-${LOGS_BIN:-}}"
if [ -z "$LOGS_BIN" ]; then
  cargo build --release -q -p backscope-logs --example logs
  LOGS_BIN="$PWD/target/release/examples/logs"
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

repeat() { # OUT COUNT FILES...
  local out="$1" count="$2"; shift 2
  cat "$@" >"$WORK/unit"
  for _ in $(seq 1 "$count"); do cat "$WORK/unit"; done >"$out"
}
instructions() {
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$LOGS_BIN" "$1" --quiet 2>&1 | awk '/Collected :/ { print $4 }'
}
marginal() { # LABEL SMALL LARGE
  local a b sa sb
  a=$(instructions "$2"); b=$(instructions "$3")
  sa=$(stat -c %s "$2"); sb=$(stat -c %s "$3")
  awk -v l="$1" -v a="$a" -v b="$b" -v sa="$sa" -v sb="$sb" \
    'BEGIN { printf "%-12s %6.2f instructions/byte (Ir %d and %d over %d and %d bytes)\n", l, (b - a) / (sb - sa), a, b, sa, sb }'
}
repeat "$WORK/fixtures110.log" 110 crates/logs/tests/data/*.log
repeat "$WORK/fixtures330.log" 330 crates/logs/tests/data/*.log
repeat "$WORK/dense57.log" 57 tests/data/logs-corpus/*.log
repeat "$WORK/dense171.log" 171 tests/data/logs-corpus/*.log
marginal fixtures "$WORK/fixtures110.log" "$WORK/fixtures330.log"
marginal crash-dense "$WORK/dense57.log" "$WORK/dense171.log"
