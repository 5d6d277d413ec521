#!/usr/bin/env bash
# Benchmark: throughput of the log forensics (parse + analyse: `cargo run --example logs -- FILE --quiet`
# of crates/logs) on two large real-shaped logs, and its peak memory.
#
#   bench/logs.sh [RUNS] [MIB]      (defaults: 7 runs, 400 MiB)
#
# The first log is built by repeating the real fixtures of crates/logs/tests/data (Ollama issue excerpts with
# their crashes, llama-server runs with and without ANSI-coloured prefixes) until it reaches MIB MiB, so every
# kind of line the parser knows is on the hot path, crash incidents included. The second, crash-dense, repeats
# the corpus of pasted logs (tests/data/logs-corpus: 91 fragments, 58 of them cut around a crash) the same way:
# 1.45 times as many crashes per byte (63,393 against 43,820 at 400 MiB), and a larger share of the lines are a
# crash's causes, frames and consequences, each crash with its phase and signature.
# Prints the medians of wall time and of CPU time (user + system, from /usr/bin/time) with MB/s over RUNS runs
# after one warm-up run, `wc -l` on the first file as a baseline (a bare newline count: the floor for any line
# reader), and the example's own peak RSS (VmHWM). On a shared machine the CPU figure is the program's own speed.
# LOGS_BIN=path skips the build and times that binary.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-7}"
MIB="${2:-400}"
if [ -z "${LOGS_BIN:-}" ]; then
  cargo build --release -q -p backscope-logs --example logs
  LOGS_BIN="$PWD/target/release/examples/logs"
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# build NAME FILES...: repeat the concatenation of FILES to MIB MiB in $WORK/NAME.log.
build() {
  local name="$1"; shift
  cat "$@" >"$WORK/$name.unit"
  local unit reps
  unit=$(stat -c %s "$WORK/$name.unit")
  reps=$(( (MIB * 1024 * 1024 + unit - 1) / unit ))
  for _ in $(seq 1 "$reps"); do cat "$WORK/$name.unit"; done >"$WORK/$name.log"
  echo "$name log: $(stat -c %s "$WORK/$name.log") bytes, $(wc -l <"$WORK/$name.log") lines ($reps copies of the $unit-byte set)"
}
build fixtures crates/logs/tests/data/*.log
build crash-dense tests/data/logs-corpus/*.log
echo "$(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"

time_runs() { # LABEL FILE CMD...
  local label="$1" file="$2"; shift 2
  local size
  size=$(stat -c %s "$file")
  "$@" >/dev/null 2>&1 # warm-up: page cache
  : >"$WORK/times"
  for _ in $(seq 1 "$RUNS"); do
    /usr/bin/time -f "%e %U %S" -a -o "$WORK/times" "$@" >/dev/null
  done
  # Wall time, and CPU time (user + system): on a shared machine the second is the program's own cost.
  awk -v n="$RUNS" -v size="$size" -v label="$label" '
    { wall[NR] = $1; cpu[NR] = $2 + $3 }
    function median(a,   i, j, t, b) {
      for (i = 1; i <= n; i++) b[i] = a[i]
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (b[j] < b[i]) { t = b[i]; b[i] = b[j]; b[j] = t }
      return (n % 2) ? b[(n + 1) / 2] : (b[n / 2] + b[n / 2 + 1]) / 2
    }
    END {
      w = median(wall); c = median(cpu)
      printf "%-36s wall median %7.3f s %7.1f MB/s | CPU median %7.3f s %7.1f MB/s  (%d runs)\n", label, w, size / w / 1e6, c, size / (c > 0 ? c : 1e-9) / 1e6, n
    }' "$WORK/times"
}

time_runs "logs example, fixtures" "$WORK/fixtures.log" "$LOGS_BIN" "$WORK/fixtures.log" --quiet
time_runs "logs example, crash-dense corpus" "$WORK/crash-dense.log" "$LOGS_BIN" "$WORK/crash-dense.log" --quiet
time_runs "wc -l (newline count), fixtures" "$WORK/fixtures.log" wc -l "$WORK/fixtures.log"
echo "logs example, fixtures: $("$LOGS_BIN" "$WORK/fixtures.log" --quiet)"
echo "logs example, crash-dense: $("$LOGS_BIN" "$WORK/crash-dense.log" --quiet)"
