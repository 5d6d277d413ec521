#!/usr/bin/env bash
# Builds bench/gpu/vk_decode_ab.cpp (the in-process A/B of bench/gpu/vk_overhead_ab.sh) against llama.cpp's headers
# from SRC (the sdist's llama.cpp folder) and the libraries in LIBDIR (libllama, libggml, libggml-base). With RPATH=1
# the binary finds them there by itself; without, it relies on LD_LIBRARY_PATH (the carried build: its bin dir moves
# with the carry, bench/gpu/carry_setup.sh sets the path). One place for the line both scripts used to spell out.
# Usage: [RPATH=1] bash bench/gpu/build_vk_decode_ab.sh SRC LIBDIR OUT
set -euo pipefail
src=$1 libdir=$2 out=$3
lib() { ls "$libdir/$1".so* 2>/dev/null | head -1; }
rpath=()
[ "${RPATH:-0}" = 1 ] && rpath=(-Wl,-rpath,"$libdir")
g++ -std=c++17 -O2 -I"$src/include" -I"$src/ggml/include" -o "$out" "$(dirname "$0")/vk_decode_ab.cpp" \
  "$(lib libllama)" "$(lib libggml)" "$(lib libggml-base)" -ldl "${rpath[@]}"
