#!/usr/bin/env bash
# Validate backscope's Vulkan layer on an NVIDIA GPU through NVIDIA's Vulkan driver, in one go:
#   1. unpack Debian's Vulkan loader and GL/EGL libraries (carried .debs) and point the loader at the NVIDIA ICD;
#   2. `backscope synth` a TinyLlama-1.1B-shaped model (F16), quantize it to Q4_K_M with the build's llama-quantize;
#      and a Mixtral-shaped mixture of experts (`--preset tiny-moe` widened: 2048 dims, 8 layers, 8 experts of
#      n_ff 1536, 2 used; about 0.8 B parameters) in F16, Q4_K_M and Q8_0;
#   3. for each model and for prompts of 8, 100 and 512 tokens and a 16-token decode: llama-bench under
#      `backscope trace` with GGML_VK_PERF_LOGGER=1, then compare_vulkan (examples/compare_vulkan.rs, the accounting
#      of src/observe/vulkan/counts.rs): the layer's dispatches per op against the perf logger's graph nodes per op (the
#      independent count), per-token MUL_MAT_ID dispatches, count_experts and helpers told apart from nodes;
#   4. pipeline statistics (VK_KHR_pipeline_executable_properties, which NVIDIA's driver offers): the trace's
#      pipeline definitions must carry them;
#   5. overhead: llama-bench pp512 and tg128 of the Q4_K_M model, repetitions alternating between no layer, the layer
#      with GGML_VK_DEBUG_MARKERS=1 (what `backscope trace` sets) and the layer without markers; medians and ratios.
# Usage: [CASES="p8 p100 p512 tg16"] [MODELS="f16 q4km moe-f16 moe-q4km moe-q8"] [OVERHEAD=1] [REPS=5]
#        bench/gpu/validate_vulkan.sh CARRY_DIR OUT_DIR
#   CARRY_DIR holds: backscope, libbackscope_vklayer.so, libbackscope_observer.so and compare_vulkan
#   (`cargo build --release --example compare_vulkan`: target/release/examples/compare_vulkan) (x86-64 release builds),
#   llama/ (the bin directory of scripts/llama-build.sh vulkan: llama-bench, llama-quantize, the ggml libraries;
#   stripped is fine, but then pipelines without a debug name keep their spirv:<hash> names),
#   debs/ (libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 from Debian bookworm, `apt-get download`),
#   and ggml-vocab-llama-spm.gguf (llama.cpp's models/ directory).
# Results (three files, within what the device tool brings back): OUT_DIR/summary.txt (human-readable),
# OUT_DIR/vulkan-validation.json (per case: dispatches per op on both sides, devices, a statistics sample; overhead
# medians), OUT_DIR/raw.tar.gz (summaries, perf logger output, trace files, overhead rows, logs).
set -euo pipefail
CARRY=$(realpath "$1")
OUT=$(realpath "$2")
HERE=$(cd "$(dirname "$0")" && pwd)
W=/tmp/bsvk
mkdir -p "$W/raw" "$OUT"
BS="$CARRY/backscope"
LAYER="$CARRY/libbackscope_vklayer.so"
OBS="$CARRY/libbackscope_observer.so"
BIN="$CARRY/llama"
COMPARE="$CARRY/compare_vulkan"
MODELS=${MODELS:-f16 q4km moe-f16 moe-q4km moe-q8}
chmod +x "$BS" "$COMPARE" "$BIN"/llama-* 2>/dev/null || true
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/summary.txt" >&2; }

log "Vulkan loader and NVIDIA ICD"
for f in "$CARRY"/debs/*.deb; do dpkg -x "$f" /; done
ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
export LD_LIBRARY_PATH="$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
"$BIN/llama-bench" --list-devices >"$W/raw/devices.txt" 2>&1 || true
log "devices: $(grep -i vulkan "$W/raw/devices.txt" | tr '\n' ' ')"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$OUT/summary.txt" 2>&1 || true

log "models: TinyLlama-1.1B shape, F16 and Q4_K_M; Mixtral-shaped MoE, F16, Q4_K_M and Q8_0"
"$BS" synth --preset tinyllama-1.1b --type f16 --vocab "$CARRY/ggml-vocab-llama-spm.gguf" -o "$W/tl-f16.gguf" \
  >"$W/raw/synth.log" 2>&1
"$BIN/llama-quantize" "$W/tl-f16.gguf" "$W/tl-q4km.gguf" Q4_K_M >>"$W/raw/synth.log" 2>&1
if [[ " $MODELS " == *" moe-"* ]]; then
  "$BS" synth --preset tiny-moe --n-embd 2048 --n-head 32 --n-head-kv 8 --n-layer 8 --n-ff 1536 --n-expert 8 \
    --n-expert-used 2 --type f16 --vocab "$CARRY/ggml-vocab-llama-spm.gguf" -o "$W/tl-moe-f16.gguf" >>"$W/raw/synth.log" 2>&1
  "$BIN/llama-quantize" "$W/tl-moe-f16.gguf" "$W/tl-moe-q4km.gguf" Q4_K_M >>"$W/raw/synth.log" 2>&1
  "$BIN/llama-quantize" "$W/tl-moe-f16.gguf" "$W/tl-moe-q8.gguf" Q8_0 >>"$W/raw/synth.log" 2>&1
fi

pairs=()
for model in $MODELS; do
  for case in ${CASES:-p8 p100 p512 tg16}; do
    case $case in
      tg16) args=(-p 0 -n 16) ;;
      *) args=(-p "${case#p}" -n 0) ;;
    esac
    name="vk-$model-$case"
    rm -rf "$W/$name"
    GGML_VK_PERF_LOGGER=1 "$BS" trace --json --dir "$W/$name" --observer "$OBS" --vklayer "$LAYER" -- \
      "$BIN/llama-bench" -m "$W/tl-$model.gguf" -ngl 99 -r 1 -o json "${args[@]}" \
      >"$W/raw/$name.out" 2>"$W/raw/$name.perf.log" || log "trace $name exit $?"
    tail -n 1 "$W/raw/$name.out" >"$W/raw/$name.json"
    cp -r "$W/$name" "$W/raw/$name.traces"
    pairs+=("$W/raw/$name.json" "$W/raw/$name.perf.log")
    log "traced $name"
  done
done
set +e
"$COMPARE" "${pairs[@]}" >"$W/raw/compare.txt"
compared=$?
set -e
grep -v '^\[{' "$W/raw/compare.txt" | tee -a "$OUT/summary.txt" >&2
log "comparison: $([ $compared = 0 ] && echo 'every case EQUAL after accounting' || echo "some case DIFFERENT (exit $compared)")"

# Pipeline statistics: ggml-vulkan enables VK_KHR_pipeline_executable_properties where offered; the layer records
# what the driver reports for each pipeline.
stats_sample=$(grep -h '"stats":' "$W"/vk-q4km-p512/trace-*.jsonl 2>/dev/null | head -n 3 || true)
log "pipelines with driver statistics in vk-q4km-p512: $(grep -h -c '"stats":' "$W"/vk-q4km-p512/trace-*.jsonl 2>/dev/null || echo 0)"

if [ "${OVERHEAD:-1}" = 1 ]; then
  log "overhead: pp512 and tg128 of Q4_K_M, ${REPS:-5} repetitions alternating plain / layer / layer with debug markers"
  mkdir -p "$W/ov" "$W/manifest"
  printf '{"file_format_version":"1.1.2","layer":{"name":"VK_LAYER_BACKSCOPE_dispatch","type":"GLOBAL","library_path":"%s","api_version":"1.3.0","implementation_version":"1","description":"backscope","functions":{"vkNegotiateLoaderLayerInterfaceVersion":"vkNegotiateLoaderLayerInterfaceVersion"}}}\n' \
    "$LAYER" >"$W/manifest/VkLayer_backscope_dispatch.json"
  for rep in $(seq 1 "${REPS:-5}"); do
    for mode in plain layer layer-markers; do
      envs=(env -u GGML_VK_DEBUG_MARKERS)
      if [ "$mode" != plain ]; then
        envs+=(VK_ADD_LAYER_PATH="$W/manifest" VK_INSTANCE_LAYERS=VK_LAYER_BACKSCOPE_dispatch BACKSCOPE_TRACE_DIR="$W/ov")
      fi
      [ "$mode" = layer-markers ] && envs+=(GGML_VK_DEBUG_MARKERS=1)
      "${envs[@]}" "$BIN/llama-bench" -m "$W/tl-q4km.gguf" -ngl 99 -r 1 -p 512 -n 128 -o jsonl 2>>"$W/raw/overhead.log" |
        sed "s/^{/{\"mode\":\"$mode\",\"rep\":$rep,/" >>"$W/raw/overhead-vulkan.jsonl"
      rm -f "$W"/ov/trace-*.jsonl
    done
  done
  python3 "$HERE/compare_vulkan.py" --overhead "$W/raw/overhead-vulkan.jsonl" >"$W/raw/overhead.txt"
  head -n -1 "$W/raw/overhead.txt" | tee -a "$OUT/summary.txt" >&2
fi

python3 - "$W/raw/compare.txt" "$W/raw/overhead.txt" "$OUT/vulkan-validation.json" "$stats_sample" <<'PY'
import json, sys
compare = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
try:
    overhead = json.loads(open(sys.argv[2]).read().strip().splitlines()[-1])
except (OSError, IndexError, ValueError):
    overhead = None
sample = [json.loads(l) for l in sys.argv[4].splitlines() if l.strip()]
json.dump({"cases": compare, "overhead": overhead, "pipeline_statistics_sample": sample}, open(sys.argv[3], "w"), indent=1)
PY
tar -czf "$OUT/raw.tar.gz" -C "$W" raw
log "done"
