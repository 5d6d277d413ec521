#!/usr/bin/env bash
# Benchmark: the dispatch observer's cost per kernel launch on the CPU, against the baseline of the same
# launch made straight into the runtime, in one process (bench/observer/launch_loop.c; the runtime is the
# test double bench/observer/minimal_runtime.c, whose launch costs a few ns, so the observer's share shows).
# Each run also repeats without LD_PRELOAD as the A/A control (both pointers are then the runtime's).
# Prints the medians over RUNS runs and the cost relative to a real CUDA launch (≈2,900 ns host time on the
# H200 machine, bench/gpu/launch_ab.cu). Four situations (launch_loop's modes): `plain` (no capture ever),
# `capturing` (every launch goes into an open stream capture: the recording path), `stale` (a capture on the
# launch stream ended where the observer cannot see it) and `stale-other` (the same capture, launches on
# another stream).
# Usage: bench/observer_launch.sh [RUNS] [OTHER_OBSERVER.so]   (another build, e.g. an older commit's, measured in the
#        same run for a before/after comparison)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-7}"
cargo build --release -q -p backscope-observer
OBS="$PWD/target/release/libbackscope_observer.so"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cc -O2 -shared -fPIC -o "$WORK/libminimal_runtime.so" bench/observer/minimal_runtime.c
cc -O2 -o "$WORK/launch_loop" bench/observer/launch_loop.c -L"$WORK" -lminimal_runtime -ldl -Wl,-rpath,"$WORK"
for run in $(seq 1 "$RUNS"); do
  for mode in plain capturing stale stale-other; do
    "$WORK/launch_loop" 4000 "$WORK/libminimal_runtime.so" "$mode" | sed 's/^{/{"arm":"control",/'
    mkdir -p "$WORK/trace"
    LD_PRELOAD="$OBS" BACKSCOPE_TRACE_DIR="$WORK/trace" "$WORK/launch_loop" 4000 "$WORK/libminimal_runtime.so" "$mode" |
      sed 's/^{/{"arm":"observer",/'
    if [ -n "${2:-}" ]; then
      LD_PRELOAD="$(realpath "$2")" BACKSCOPE_TRACE_DIR="$WORK/trace" "$WORK/launch_loop" 4000 \
        "$WORK/libminimal_runtime.so" "$mode" | sed 's/^{/{"arm":"other",/'
    fi
  done
done >"$WORK/rows.jsonl"
python3 - "$WORK/rows.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for mode in ("plain", "capturing", "stale", "stale-other"):
    print(f"[{mode}]")
    for arm, label in [("control", "A/A control (no LD_PRELOAD)"), ("observer", "observer preloaded"),
                       ("other", "other observer preloaded")]:
        r = [x for x in rows if x["arm"] == arm and x["mode"] == mode]
        if not r:
            continue
        base, bound, diff = (statistics.median(x[k] for x in r) for k in ("runtime_ns", "bound_ns", "paired_diff_ns"))
        print(f"  {label:28} runtime {base:6.2f} ns/launch   through the bound symbol {bound:6.2f} ns/launch   "
              f"added {diff:+6.2f} ns = {diff / 2900 * 100:.2f}% of a 2,900 ns CUDA launch   (median of {len(r)} runs)")
PY
