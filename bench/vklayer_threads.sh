#!/usr/bin/env bash
# Benchmark: what the threads `backscope trace --env` starts in a Vulkan process cost in CPU time: the layer's writer
# (`backscope-vk`, a window every BACKSCOPE_TRACE_INTERVAL_MS) and its hang watcher (`backscope-vk-ha`), beside
# ggml's own threads, over a real decode (llama-bench tg, a tiny Q4_K_M on lavapipe, one CPU thread). On the GPU
# machine's cost rounds every process is pinned to one core (bench/gpu/blackbox_cost.sh, PIN=3), so whatever these
# threads run is taken from ggml's submitting thread there; this says how much that can be.
# Each thread's time on a CPU is /proc/PID/task/TID/schedstat's first field (nanoseconds, exact, unlike the tick-counted
# utime), with its timeslices (the third field), read every half second while the process runs; each thread's latest
# reading is printed, with its share of the run's wall time.
# Usage: [TOKENS=256] bench/vklayer_threads.sh LAYER_SO; needs the optimised Vulkan llama.cpp build
#   (scripts/llama-build.sh vulkan-release), `backscope` on PATH or in target/release, lavapipe; OBSERVER as in
#   bench/vklayer_ggml_instructions.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
TOKENS="${TOKENS:-256}"
LAYER=$(realpath "$1")
BIN=$(bash scripts/llama-build.sh vulkan-release)
BACKSCOPE=$(command -v backscope || echo target/release/backscope)
OBSERVER="${OBSERVER:-$(dirname "$LAYER")/libbackscope_observer.so}"
[ -f "$OBSERVER" ] || OBSERVER=target/release/libbackscope_observer.so
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
PATH="$BIN:$PATH" "$BACKSCOPE" synth --preset tiny --type q4_k_m -o "$WORK/tiny.gguf" >/dev/null
mapfile -t e < <("$BACKSCOPE" trace --env --dir "$WORK/trace" --observer "$OBSERVER" --vklayer "$LAYER" |
  sed -n 's/^export //p')
mkdir -p "$WORK/trace"
env "${e[@]}" GGML_VK_VISIBLE_DEVICES=0 VK_ICD_FILENAMES=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json \
  LD_LIBRARY_PATH="$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  "$BIN/llama-bench" -m "$WORK/tiny.gguf" -ngl 99 -p 0 -n "$TOKENS" -r 1 -t 1 -o jsonl \
  >"$WORK/out.jsonl" 2>"$WORK/err" &
pid=$!
start=$(date +%s%N)
end=$start
# Every reading is kept (a thread that ends before the process, as the writer and watcher do at its exit, keeps the
# last time it was read); each thread's latest reading is what counts.
while kill -0 "$pid" 2>/dev/null; do
  for t in /proc/"$pid"/task/*; do
    printf '%s %s %s\n' "${t##*/}" "$(tr ' ' _ <"$t/comm" 2>/dev/null)" "$(cut -d' ' -f1,3 "$t/schedstat" 2>/dev/null)"
  done >>"$WORK/readings" 2>/dev/null || true
  end=$(date +%s%N)
  sleep 0.5
done
wait "$pid" || { echo "llama-bench failed:" >&2; tail -5 "$WORK/err" >&2; exit 1; }
python3 - "$WORK/readings" "$((end - start))" "$TOKENS" <<'PY'
import sys
path, wall_ns, tokens = sys.argv[1], int(sys.argv[2]), sys.argv[3]
latest = {}  # thread id -> (name, ns on a CPU, timeslices), its last complete reading
for line in open(path):
    parts = line.split()
    if len(parts) == 4:
        latest[parts[0]] = (parts[1], int(parts[2]), int(parts[3]))
print("over %.1f s of llama-bench tg%s (to the last reading):" % (wall_ns / 1e9, tokens))
for name, ns, slices in sorted(latest.values(), key=lambda t: -t[1]):
    ours = " (the layer's)" if name.startswith("backscope") else ""
    print("  %-16s %10.2f ms on a CPU in %6d timeslices: %.4f%% of the wall time%s" % (
        name, ns / 1e6, slices, 100 * ns / wall_ns, ours))
PY
