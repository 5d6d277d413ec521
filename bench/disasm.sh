#!/usr/bin/env bash
# Benchmark: `backscope scan --disasm` disassembling and classifying every kernel of one target, cache off:
#   - gfx942 of the real 168 MB libggml-hip.so (cyllama-rocm 0.2.18): 130 code objects, llvm-objdump-19;
#   - sm_75 of the real libggml-cuda.so (cyllama-cuda12 0.2.18): 137 cubins, nvdisasm 13.5 from the tool cache.
# Prints per run the wall time, kernels and code objects, kernels/s, and the cores used ((user + sys) / wall of
# backscope and the disassemblers it ran, from /usr/bin/time). Also the same gfx942 run with the cache warm.
# Usage: bench/disasm.sh [RUNS]   (scripts/fixtures.sh and scripts/install-deps.sh run first)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-1}"
CACHE="${BACKSCOPE_CACHE:-$HOME/.cache/backscope}"
HIP="$CACHE/fixtures/unpacked/cyllama_rocm/cyllama_rocm.libs/libggml-hip-f822f971.so"
CUDA="$CACHE/fixtures/unpacked/cyllama_cuda12/cyllama_cuda12.libs/libggml-cuda-3851d25f.so"
for f in "$HIP" "$CUDA"; do [ -f "$f" ] || { echo "missing $f: run scripts/fixtures.sh" >&2; exit 2; }; done
cargo build --release -q
BIN="$PWD/target/release/backscope"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

one() { # label, cache flags, arch, library
  local label=$1 cacheflags=$2 arch=$3 lib=$4
  # shellcheck disable=SC2086
  /usr/bin/time -f "%e %U %S" -o "$WORK/time" "$BIN" scan --json --disasm $cacheflags --arch "$arch" \
    --output "$WORK/out.json" "$lib" || true
  python3 - "$label" "$WORK/time" "$WORK/out.json" "$(nproc)" <<'PY'
import json, sys
label, tfile, ofile, cores = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
wall, user, sys_ = (float(x) for x in open(tfile).read().split()[-3:])
s = json.load(open(ofile))["disasm"]["stats"]
print(f"{label:44} {wall:7.1f} s  {s['kernels']:6d} kernels in {s['disassembled'] + s['from_cache']:3d} code objects"
      f"  {s['kernels'] / wall:7.1f} kernels/s  {(user + sys_) / wall:4.2f} of {cores} cores  ({s['parallel']} at a time,"
      f" {s['from_cache']} from cache, {s['failed']} failed, {s['instructions']} instructions)")
PY
}

for _ in $(seq "$RUNS"); do
  one "gfx942, libggml-hip (llvm-objdump, no cache)" --no-disasm-cache gfx942 "$HIP"
  one "sm_75, libggml-cuda (nvdisasm, no cache)" --no-disasm-cache sm_75 "$CUDA"
done
one "gfx942, libggml-hip (filling the cache)" "--disasm-cache $WORK/cache" gfx942 "$HIP"
one "gfx942, libggml-hip (cache warm)" "--disasm-cache $WORK/cache" gfx942 "$HIP"
