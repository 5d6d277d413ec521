#!/usr/bin/env bash
# Benchmark: `backscope scan --kernels --json` of the real 168 MB libggml-hip.so (cyllama-rocm 0.2.18) against
# the investigation's method `strings -a FILE | grep -c gfx` (the baseline), clang-offload-bundler listing (first
# bundle only: it reads one bundle per input) and a manual full metadata extraction (bundle walk + llvm-readelf).
# Prints medians and ratios against the baseline, and backscope's peak RSS versus the file size.
# Usage: bench/scan.sh [RUNS]   (needs: hyperfine, binutils, clang-15, llvm-15; scripts/fixtures.sh run first)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-15}"
CACHE="${BACKSCOPE_CACHE:-$HOME/.cache/backscope}"
LIB="$CACHE/fixtures/unpacked/cyllama_rocm/cyllama_rocm.libs/libggml-hip-f822f971.so"
CUDA_LIB="$CACHE/fixtures/unpacked/cyllama_cuda12/cyllama_cuda12.libs/libggml-cuda-3851d25f.so"
for f in "$LIB" "$CUDA_LIB"; do [ -f "$f" ] || { echo "missing $f: run scripts/fixtures.sh" >&2; exit 2; }; done
command -v hyperfine >/dev/null || { echo "hyperfine not found: apt-get install hyperfine" >&2; exit 2; }
cargo build --release -q
BIN="$PWD/target/release/backscope"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
objcopy --dump-section .hip_fatbin="$WORK/fatbin" "$LIB" "$WORK/stripped.o" 2>/dev/null || true

hyperfine -N --warmup 2 --runs "$RUNS" --export-json "$WORK/fast.json" \
  -n "backscope scan --kernels --json" "$BIN scan --kernels --json --output $WORK/out.json $LIB" \
  -n "strings -a | grep -c gfx (baseline)" "bash -c 'strings -a $LIB | grep -c gfx'" \
  -n "clang-offload-bundler --list (1st bundle)" "bash -c 'objcopy --dump-section .hip_fatbin=$WORK/fb $LIB $WORK/x.o && clang-offload-bundler-15 --list --type=o --input=$WORK/fb'" \
  -n "backscope scan --kernels --json (CUDA: cyllama-cuda12 libggml-cuda)" "$BIN scan --kernels --json --output $WORK/cuda.json $CUDA_LIB" >&2
hyperfine -N --warmup 0 --runs 3 --export-json "$WORK/slow.json" \
  -n "manual extraction: bundle walk + llvm-readelf --notes" "bash -c 'rm -rf $WORK/ex && mkdir $WORK/ex && python3 tests/oracles/offload.py $LIB $WORK/ex >/dev/null && llvm-readelf-15 --notes $WORK/ex/*.co >/dev/null'" >&2

peak_kb=$( { /usr/bin/time -f "%M" "$BIN" scan --kernels --json --output "$WORK/out.json" "$LIB"; } 2>&1 | tail -1)
python3 - "$WORK/fast.json" "$WORK/slow.json" "$peak_kb" "$(stat -c %s "$LIB")" <<'PY'
import json, statistics, sys
results = json.load(open(sys.argv[1]))["results"] + json.load(open(sys.argv[2]))["results"]
med = {r["command"]: statistics.median(r["times"]) for r in results}
base = next(v for k, v in med.items() if "baseline" in k)
print(f"{'command':58} {'median':>10} {'vs strings':>12}")
for k, v in med.items():
    print(f"{k:58} {v*1e3:8.1f} ms {base / v:10.1f}x")
peak, size = int(sys.argv[3]) * 1024, int(sys.argv[4])
print(f"backscope peak RSS {peak/2**20:.1f} MiB for a {size/2**20:.1f} MiB file ({peak/size:.2f} of the file size)")
PY
