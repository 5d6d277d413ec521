#!/usr/bin/env bash
# Benchmark: throughput of the log forensics (parse + analyse, `examples/logs.rs --quiet`) on a large
# real-shaped log, and its peak memory.
#
#   bench/logs.sh [RUNS] [MIB]      (defaults: 7 runs, 400 MiB)
#
# The log is built by repeating the real fixtures of crates/logs/tests/data (Ollama issue excerpts with
# their crashes, llama-server runs with and without ANSI prefixes) until it reaches MIB MiB, so every
# line kind of the parser is on the hot path, crash incidents included. Prints the median wall time and
# MB/s over RUNS runs (one warm-up run first, not counted), `wc -l` on the same file as a baseline
# (a pure newline count, the floor for any line-oriented reader), and the peak RSS of one run.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-7}"
MIB="${2:-400}"
cargo build --release -q -p backscope-logs --example logs
BIN="$PWD/target/release/examples/logs"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
LOG="$WORK/big.log"
cat crates/logs/tests/data/*.log >"$WORK/unit.log"
unit=$(stat -c %s "$WORK/unit.log")
reps=$(( (MIB * 1024 * 1024 + unit - 1) / unit ))
for _ in $(seq 1 "$reps"); do cat "$WORK/unit.log"; done >"$LOG"
size=$(stat -c %s "$LOG")
echo "log: $size bytes ($(wc -l <"$LOG") lines), $reps copies of the $unit-byte fixture set" >&2

time_runs() { # LABEL CMD...
  local label="$1"; shift
  "$@" >/dev/null 2>&1 # warm-up (page cache)
  local times=()
  for _ in $(seq 1 "$RUNS"); do
    local t0 t1
    t0=$(date +%s.%N)
    "$@" >/dev/null
    t1=$(date +%s.%N)
    times+=("$(echo "$t1 - $t0" | bc -l)")
  done
  printf '%s\n' "${times[@]}" | sort -g | awk -v n="$RUNS" -v size="$size" -v label="$label" '
    { t[NR] = $1 }
    END {
      med = (n % 2) ? t[(n + 1) / 2] : (t[n / 2] + t[n / 2 + 1]) / 2
      printf "%-40s median %8.3f s  %8.1f MB/s  (min %.3f, max %.3f, %d runs)\n", label, med, size / med / 1e6, t[1], t[n], n
    }'
}

time_runs "logs example (parse + analyse)" "$BIN" "$LOG" --quiet
time_runs "wc -l (newline count baseline)" wc -l "$LOG"
peak_kb=$( { /usr/bin/time -f "%M" "$BIN" "$LOG" --quiet >/dev/null; } 2>&1 | tail -1)
echo "logs example peak RSS: $((peak_kb / 1024)) MiB for a $((size / 1024 / 1024)) MiB log"
"$BIN" "$LOG" --quiet
