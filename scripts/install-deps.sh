#!/usr/bin/env bash
# Install the system packages backscope's tests and demo use, on Debian 12 (bookworm), as root.
# hipcc/llvm/clang give real HIP code objects and independent readers (llvm-readelf, clang-offload-bundler);
# librocsparse0 is a real ROCm 5.3 multi-target library; zstd/binutils/python3 serve test oracles; strace shows the
# sweep fsyncs directories after renames; ccache lets neighbouring llama.cpp builds of `bisect` reuse objects;
# chromium loads the HTML reports headless in the output tests (their DOM, their network log, a screenshot);
# golang-go builds the cgo crash test program (the shape of Ollama's Go runner); postgresql gives the fleet tests a
# real server (a throw-away cluster per test, on a Unix socket only); man-db is `man`, which the package test
# (scripts/test-package.sh) reads the installed manual pages with; clang-19 compiles the llama.cpp builds (faster
# than gcc: scripts/llama-build.sh); chrpath sets `$ORIGIN` RUNPATHs in the release
# archives tests/bisect/release_archives.rs packs from the bisect builds, as llama.cpp's release job does.
set -euo pipefail
PKGS=(hipcc llvm-15 clang-15 llvm-19 clang-19 librocsparse0 binutils zstd unzip ca-certificates strace chromium golang-go postgresql ccache man-db chrpath)
# shellcheck source=scripts/apt-missing.sh
. "$(dirname "$0")/apt-missing.sh"
apt_install_missing "${PKGS[@]}"
# gguf-py (the independent GGUF reader the synth tests compare against) needs numpy.
python3 -c "import numpy" 2>/dev/null || python3 -m pip install -q numpy
