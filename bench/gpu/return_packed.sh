#!/usr/bin/env bash
# Packs a device call's folder for the trip back: the device machine returns at most 8 files from $OUT, so the whole
# of $OUT/NAME goes into $OUT/NAME.tgz (unpack it with `tar -xzf NAME.tgz -C NAME`), and only the files named in KEEP
# stay beside it, to be read without unpacking.
# Usage: bash bench/gpu/return_packed.sh NAME [KEEP …]   (e.g. summary.txt)
set -euo pipefail
o="$OUT/$1"
shift
tar -C "$o" -czf "$o.tgz" .
keep=()
for name in "$@"; do keep+=(! -name "$name"); done
find "$o" -type f "${keep[@]}" -delete
