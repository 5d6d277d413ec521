#!/usr/bin/env bash
# Record what ggml-vulkan dispatches on a real NVIDIA GPU, for holding device impersonation against it
# (issue 29 item 3: the H200's profile impersonated on lavapipe must dispatch what the H200 did).
#   1. unpack Debian's Vulkan loader (carried .debs) and point it at the NVIDIA ICD (as validate_vulkan.sh does);
#   2. `backscope synth` a Mixtral-routed MoE (`tiny-moe`: 8 experts, 2 per token) and a TinyLlama-1.1B-shaped
#      dense model in F16, quantized to Q8_0 / Q4_K_M with the build's llama-quantize;
#   3. each case is one llama-bench run (`-r 1`) under `backscope trace` with the Vulkan layer: prompts of 1, 8, 9,
#      64 and 512 tokens (`-n 0`) and a 16-token decode (`-p 0 -n 16`), with every layer offloaded, some, or none
#      (`-ngl 0`: ggml still offloads large matrix products to the GPU, which is what the case checks). A case named
#      `cm1-…` runs with GGML_VK_DISABLE_COOPMAT2=1, so that ggml takes its KHR cooperative-matrix (coopmat1)
#      pipelines on a device that also offers NV coopmat2 (ggml-vulkan.cpp:4070-4071);
#   4. when CARRY_DIR has vk_coopmat_caps (bench/gpu/vk_coopmat_caps.c): the driver's cooperative-matrix shapes,
#      flexible dimensions, coopmat2 properties and bf16/coopmat features, which vulkaninfo 1.3.239 does not print.
# The traces are the expected side of tests/vulkan/impersonate.rs; nothing here judges them.
# Usage: [CASES="..."] bench/gpu/record_vulkan_dispatch.sh CARRY_DIR OUT_DIR
#   CARRY_DIR holds: backscope, libbackscope_vklayer.so, llama/ (the bin directory of scripts/llama-build.sh vulkan),
#   debs/ (libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 from Debian bookworm, `apt-get download`), ggml-vocab-llama-spm.gguf.
#   A case is [cm1-]MODEL-ngl-N-SIZE with MODEL one of moe-q8 moe-q4km tl-f16 tl-q4km tl-q8, SIZE pN or tg16.
# Results: OUT_DIR/traces/CASE.traces (the layer's trace file), OUT_DIR/summary.txt (with ggml's device line of each
# run), OUT_DIR/devices.txt, OUT_DIR/quantize.log, OUT_DIR/coopmat-caps.json.
set -euo pipefail
CARRY=$(realpath "$1")
OUT=$(realpath "$2")
W=/var/tmp/bsvkrec
mkdir -p "$W" "$OUT/traces"
BS="$CARRY/backscope"
BIN="$CARRY/llama"
chmod +x "$BS" "$BIN"/llama-* 2>/dev/null || true
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/summary.txt" >&2; }

for f in "$CARRY"/debs/*.deb; do dpkg -x "$f" /; done
ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export LD_LIBRARY_PATH="$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
"$BIN/llama-bench" --list-devices >"$OUT/devices.txt" 2>&1 || true
log "devices: $(grep -i vulkan "$OUT/devices.txt" | tr '\n' ' ')"
if [ -f "$CARRY/vk_coopmat_caps" ]; then
  chmod +x "$CARRY/vk_coopmat_caps"
  "$CARRY/vk_coopmat_caps" >"$OUT/coopmat-caps.json" 2>>"$OUT/summary.txt" || log "vk_coopmat_caps: exit $?"
fi

synth() { # PRESET NAME
  [ -f "$W/$2-f16.gguf" ] || "$BS" synth --preset "$1" --type f16 --vocab "$CARRY/ggml-vocab-llama-spm.gguf" \
    -o "$W/$2-f16.gguf" >>"$OUT/quantize.log" 2>&1
}
quantize() { # NAME SUFFIX TYPE
  [ -f "$W/$1-$2.gguf" ] || "$BIN/llama-quantize" "$W/$1-f16.gguf" "$W/$1-$2.gguf" "$3" >>"$OUT/quantize.log" 2>&1
}
synth tiny-moe moe
synth tinyllama-1.1b tl
quantize moe q8 Q8_0
quantize moe q4km Q4_K_M
quantize tl q4km Q4_K_M
quantize tl q8 Q8_0

DEFAULT_CASES=""
for size in p1 p9 p64 p512 tg16; do
  DEFAULT_CASES+=" moe-q8-ngl-99-$size moe-q4km-ngl-99-$size moe-q4km-ngl-1-$size tl-q4km-ngl-0-$size tl-q4km-ngl-11-$size"
done
failed=0
for case in ${CASES:-$DEFAULT_CASES}; do
  env=()
  case $case in cm1-*) env=(GGML_VK_DISABLE_COOPMAT2=1) ;; esac
  model=${case#cm1-}
  model=${model%%-ngl-*}
  rest=${case#*-ngl-}
  ngl=${rest%%-*}
  size=${rest#*-}
  case $size in
    tg16) bench=(-p 0 -n 16) ;;
    *) bench=(-p "${size#p}" -n 0) ;;
  esac
  rm -rf "$W/$case"
  if env "${env[@]}" "$BS" trace --dir "$W/$case" --vklayer "$CARRY/libbackscope_vklayer.so" -- \
    "$BIN/llama-bench" -m "$W/$model.gguf" -ngl "$ngl" -r 1 "${bench[@]}" >"$W/$case.out" 2>&1 &&
    files=("$W/$case"/*) && [ -f "${files[0]}" ]; then
    cp "${files[0]}" "$OUT/traces/$case.traces"
    log "$case: ${#files[@]} trace file(s), $(grep -c '"window"' "$OUT/traces/$case.traces") windows;" \
      "$(grep -m1 '^ggml_vulkan: 0 = ' "$W/$case.out" || echo 'no ggml device line')"
  else
    failed=1
    log "$case: exit $?: $(tail -3 "$W/$case.out" | tr '\n' ' ')"
  fi
done
exit $failed
