#!/usr/bin/env bash
# The Vulkan layer's black box on an NVIDIA GPU (NVIDIA's driver offers VK_AMD_buffer_marker, so the layer follows
# progress with the GPU's own markers, dispatch by dispatch):
#   1. vkspin (crates/vklayer/tests/c/vkspin.c, bench/vklayer/spin.comp): a real GPU spin in submission 2 after
#      submission 1 completed; the hang watcher (0.5 s), a SIGSEGV while the GPU spins, a VK_ERROR_DEVICE_LOST from the
#      test layer below ours (lost_layer.c) while the GPU spins, the same with spin and after_c in one command buffer
#      (markers tell them apart), a normal run, and the black box off;
#   2. the cost: llama-bench (TinyLlama-shaped Q4_K_M, `backscope synth`) pp512/tg256 -r 5, ROUNDS interleaved rounds
#      of separate processes: plain, the layer with the black box on, off, and on with ggml's debug markers
#      (GGML_VK_DEBUG_MARKERS=1, which `backscope trace` sets to name graph nodes);
#   3. llama-bench killed with SIGSEGV mid-run with the black box on, at ten moments.
# Usage: bench/gpu/blackbox_h200.sh CARRY_DIR OUT_DIR
#   CARRY_DIR: backscope.xz, llama.tar.xz (a stripped Vulkan llama.cpp bin dir), debs/ (Debian's Vulkan loader),
#   ggml-vocab-llama-spm.gguf, bb/{vkspin,spin.spv,liblost_layer.so,libbackscope_vklayer.so}.
# Results: OUT_DIR/summary.txt and OUT_DIR/raw.tar.gz (the traces; summarize them with `backscope trace --read`).
set -euo pipefail
CARRY=$(realpath "$1")
OUT=$(realpath "$2")
W=/var/tmp/bsbb
rm -rf "$W"
mkdir -p "$W/raw" "$OUT"
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/summary.txt" >&2; }

for f in "$CARRY"/debs/*.deb; do dpkg -x "$f" /; done
ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
xz -dc "$CARRY/backscope.xz" >"$W/backscope" && chmod +x "$W/backscope"
mkdir -p "$W/llama" && tar -xJf "$CARRY/llama.tar.xz" -C "$W/llama"
BIN=$(dirname "$(find "$W/llama" -name llama-bench -type f | head -1)")
export LD_LIBRARY_PATH="$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
BB="$CARRY/bb"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$OUT/summary.txt" 2>&1 || true

manifest() { # DIR NAME LIBRARY
  mkdir -p "$1"
  printf '{"file_format_version":"1.1.2","layer":{"name":"%s","type":"GLOBAL","library_path":"%s","api_version":"1.3.0","implementation_version":"1","description":"t","functions":{"vkNegotiateLoaderLayerInterfaceVersion":"vkNegotiateLoaderLayerInterfaceVersion"}}}\n' \
    "$2" "$3" >"$1/layer.json"
}
manifest "$W/ours" VK_LAYER_BACKSCOPE_dispatch "$BB/libbackscope_vklayer.so"
manifest "$W/below" VK_LAYER_TEST_lost "$BB/liblost_layer.so"

spin() { # NAME MODE ARGS... (env from the caller)
  local name=$1 mode=$2
  shift 2
  mkdir -p "$W/raw/$name"
  set +e
  VK_ADD_LAYER_PATH="$W/ours:$W/below" VK_INSTANCE_LAYERS=VK_LAYER_BACKSCOPE_dispatch:VK_LAYER_TEST_lost \
    BACKSCOPE_TRACE_DIR="$W/raw/$name" timeout 60 "$BB/vkspin" "$BB/spin.spv" "$mode" "$@" \
    >"$W/raw/$name.stdout" 2>"$W/raw/$name.stderr"
  local rc=$?
  set -e
  log "vkspin $name: exit $rc; $(tr '\n' ' ' <"$W/raw/$name.stdout")"
  grep -hoE '"(hang_ms|crash|device_lost)":[^}]*\}*' "$W/raw/$name"/*.jsonl 2>/dev/null | head -3 | cut -c1-600 >>"$OUT/summary.txt" || true
}
LOST_AFTER=1000 BACKSCOPE_VK_HANG_MS=500 spin hang hang 3
LOST_AFTER=1000 BACKSCOPE_VK_HANG_MS=500 spin hang-grouped hang 3 grouped
LOST_AFTER=1000 BACKSCOPE_VK_HANG_MS=0 spin segv segv
LOST_AFTER=2 BACKSCOPE_VK_HANG_MS=0 spin lost lost
LOST_AFTER=1000 BACKSCOPE_VK_HANG_MS=2000 spin exit exit
LOST_AFTER=1000 BACKSCOPE_VK_BLACKBOX=0 spin off segv

# A model.
"$W/backscope" synth --preset tinyllama-1.1b --type f16 --vocab "$CARRY/ggml-vocab-llama-spm.gguf" -o "$W/tl-f16.gguf" \
  >"$W/raw/synth.log" 2>&1
"$BIN/llama-quantize" "$W/tl-f16.gguf" "$W/tl-q4km.gguf" Q4_K_M >>"$W/raw/synth.log" 2>&1
M="$W/tl-q4km.gguf"

# The cost: interleaved processes, ROUNDS rounds of plain / black box on / black box off.
ROUNDS=${ROUNDS:-16}
echo "round arm test t/s" >"$OUT/overhead.txt"
for r in $(seq 1 "$ROUNDS"); do
  for arm in plain on off markers; do
    env=()
    case $arm in
      on) env=(VK_ADD_LAYER_PATH="$W/ours" VK_INSTANCE_LAYERS=VK_LAYER_BACKSCOPE_dispatch BACKSCOPE_TRACE_DIR="$W/raw/ab-$arm-$r") ;;
      off) env=(VK_ADD_LAYER_PATH="$W/ours" VK_INSTANCE_LAYERS=VK_LAYER_BACKSCOPE_dispatch BACKSCOPE_TRACE_DIR="$W/raw/ab-$arm-$r" BACKSCOPE_VK_BLACKBOX=0) ;;
      markers) env=(VK_ADD_LAYER_PATH="$W/ours" VK_INSTANCE_LAYERS=VK_LAYER_BACKSCOPE_dispatch BACKSCOPE_TRACE_DIR="$W/raw/ab-$arm-$r" GGML_VK_DEBUG_MARKERS=1) ;;
    esac
    # The layer observes only into an existing directory (without it, it says so once and only forwards calls).
    mkdir -p "$W/raw/ab-$arm-$r"
    env "${env[@]}" "$BIN/llama-bench" -m "$M" -ngl 99 -p 512 -n 256 -r 5 -o csv >"$W/raw/ab-$arm-$r.csv" 2>/dev/null || true
    awk -F, -v r="$r" -v a="$arm" 'NR>1 { gsub(/"/,""); for (i=1;i<=NF;i++) { if ($i ~ /^[0-9]+$/ && i>1) {} } print r, a, $0 }' \
      "$W/raw/ab-$arm-$r.csv" >>"$W/raw/ab-rows.txt"
  done
done
head -1 "$W/raw/ab-plain-1.csv" >"$OUT/ab-header.csv" || true
cp "$W/raw/ab-rows.txt" "$OUT/ab-rows.txt" || true
# llama-bench killed mid-run with the black box on, at KILLS different moments (after the cost runs, so the driver's
# pipeline cache is warm and the runs are past start-up).
for delay in ${KILL_DELAYS:-2.0 2.5 3.0 3.5 4.0 4.5 5.0 5.5 6.0 6.5}; do
  d="$W/raw/killed-$delay"
  mkdir -p "$d"
  VK_ADD_LAYER_PATH="$W/ours" VK_INSTANCE_LAYERS=VK_LAYER_BACKSCOPE_dispatch BACKSCOPE_TRACE_DIR="$d" \
    "$BIN/llama-bench" -m "$M" -ngl 99 -p 512 -n 64 -r 1000 >"$d.stdout" 2>"$d.stderr" &
  pid=$!
  sleep "$delay"
  kill -SEGV "$pid"
  set +e
  wait "$pid"
  rc=$?
  set -e
  log "llama-bench killed after $delay s: exit $rc"
done
tar -czf "$OUT/raw.tar.gz" -C "$W" raw
log "done"
