#!/usr/bin/env bash
# Install everything and run backscope's main job on a machine without a GPU:
#  1. scan real, freely downloadable runtime libraries: which GPU archs each ggml backend carries code for, and what
#     that means for an AMD Vega (gfx900) card;
#  2. synthesize a small llama model and run a real matched sweep of llama.cpp's CPU backend against its Vulkan
#     backend (on Mesa's lavapipe) across num_gpu 0, 1, -1, traced (`--trace`: the Vulkan cells list the compute
#     pipelines each request dispatched, through backscope's Vulkan layer), printing the per-cell table and the claims.
# The first run builds llama.cpp with its Vulkan backend and backscope (about 16 minutes on a fresh 2-core machine);
# later runs reuse ~/.cache/backscope.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/fixtures.sh
cargo build --release -q
CACHE="${BACKSCOPE_CACHE:-$HOME/.cache/backscope}"
FIX="$CACHE/fixtures/unpacked"
BS=./target/release/backscope
set -x
$BS scan --arch "${ARCH:-gfx900}" \
  "$FIX/cyllama_rocm/cyllama_rocm.libs" "$FIX/cyllama_cuda12/cyllama_cuda12.libs" \
  "$FIX/jax_rocm7_plugin" /usr/lib/x86_64-linux-gnu/librocsparse.so.0.1 "$FIX/librocblas0"
set +x
LLAMA_BIN=$(bash scripts/llama-build.sh vulkan)
WORK="$CACHE/demo"
mkdir -p "$WORK"
[ -f "$WORK/tiny-q4_k_m.gguf" ] || $BS synth --preset tiny --type q4_k_m --llama-bin "$LLAMA_BIN" -o "$WORK/tiny-q4_k_m.gguf"
set -x
$BS sweep --server cpu=llama-server:--device,none --server vulkan=llama-server:--device,Vulkan0 \
  --env vulkan:GGML_VK_VISIBLE_DEVICES=0 --llama-bin "$LLAMA_BIN" --model "$WORK/tiny-q4_k_m.gguf" \
  --num-gpu 0,1,-1 --num-predict 8 --epochs 1 --trace --db "$WORK/backscope.db" --runs-dir "$WORK/runs"
