#!/usr/bin/env bash
# Benchmark: `backscope report` over a sweep database of many records, and its peak memory.
#
#   bench/report.sh [RUNS] [RECORDS]      (defaults: 7 runs, 100000 records)
#
# The database is written by examples/report_bench_db.rs through backscope's own store (Store::open,
# create_run, insert_record: what a sweep calls): 100 groups of cells (4 endpoints × 5 num_gpu × 5 prompts),
# records of the shape real ones have, about 5% crashes in one endpoint's GPU groups with their log slices, and a
# server log per server start. It lives in /dev/shm (a sweep's one fsync per cell would take minutes on disk;
# the report only reads). Then `backscope report DB` runs RUNS times after one warm-up run, in each output
# format; printed: the median wall time and CPU time (user + system, /usr/bin/time) and the largest peak RSS.
# REPORT_BIN=path skips the build and times that binary.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-7}"
RECORDS="${2:-100000}"
TARGET="${CARGO_TARGET_DIR:-target}"
cargo build --release -q --example report_bench_db
if [ -z "${REPORT_BIN:-}" ]; then
  cargo build --release -q
  REPORT_BIN="$TARGET/release/backscope"
fi
WORK=$(mktemp -d -p /dev/shm 2>/dev/null || mktemp -d)
trap 'rm -rf "$WORK"' EXIT
DB="$WORK/backscope.db"
start=$(date +%s.%N)
"$TARGET/release/examples/report_bench_db" "$DB" "$WORK/run" "$RECORDS"
echo "database: $(stat -c %s "$DB") bytes, $RECORDS records, written in $(echo "$(date +%s.%N) - $start" | bc) s; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"

time_runs() { # LABEL ARGS...
  local label="$1"; shift
  "$REPORT_BIN" report "$DB" "$@" >/dev/null # warm-up: page cache
  : >"$WORK/times"
  for _ in $(seq 1 "$RUNS"); do
    /usr/bin/time -f "%e %U %S %M" -a -o "$WORK/times" "$REPORT_BIN" report "$DB" "$@" >/dev/null
  done
  python3 - "$WORK/times" "$label" <<'PY'
import statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
wall = statistics.median(r[0] for r in rows)
cpu = statistics.median(r[1] + r[2] for r in rows)
rss = max(r[3] for r in rows) / 1024
print(f"{sys.argv[2]:<24} median wall {wall:.3f} s, median CPU {cpu:.3f} s, peak RSS {rss:.1f} MiB ({len(rows)} runs)")
PY
}

time_runs "report (text)"
time_runs "report --json" --json
time_runs "report --format html" --format html
