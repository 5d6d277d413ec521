#!/usr/bin/env bash
# Install everything and run backscope's main job on real, freely downloadable runtime libraries (no GPU needed):
# which GPU archs each ggml backend carries code for, and what that means for an AMD Vega (gfx900) card.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/fixtures.sh
cargo build --release -q
CACHE="${BACKSCOPE_CACHE:-$HOME/.cache/backscope}/fixtures/unpacked"
set -x
./target/release/backscope scan --arch "${ARCH:-gfx900}" \
  "$CACHE/cyllama_rocm/cyllama_rocm.libs" "$CACHE/cyllama_cuda12/cyllama_cuda12.libs" \
  "$CACHE/jax_rocm7_plugin" /usr/lib/x86_64-linux-gnu/librocsparse.so.0.1
