#!/usr/bin/env bash
set -u
W=$(mktemp -d /var/tmp/mm1.XXXXXX)
git -C "/var/tmp/llcuda" archive "$BACKSCOPE_BUILD" ggml/include | tar -x -C "$W" || exit 125
g++ -std=c++17 -O1 -I"$W/ggml/include" "/work/main/bench/gpu/mulmat_m1.cpp" -o "$W/mulmat_m1" \
  -L"$BACKSCOPE_BIN_DIR" -lggml -lggml-base -Wl,-rpath,"$BACKSCOPE_BIN_DIR" || exit 125
"/var/tmp/carry/a/backscope" trace --json --dir "$W/trace" --observer "/var/tmp/carry/a/libbackscope_observer.so" -- "$W/mulmat_m1" 128 2048 >"$W/trace.json" 2>"$W/trace.err" || exit 125
mkdir -p "/var/tmp/outA/steps" && cp "$W/trace.json" "/var/tmp/outA/steps/$BACKSCOPE_BUILD-trace.json"
# No GEMM/GEMV kernel at all in the trace: the observer saw nothing, so the step cannot be judged.
grep -qiE 'gemm|gemv|mul_mat' "$W/trace.json" || exit 125
if grep -q 'mul_mat_vec_f' "$W/trace.json"; then echo "$BACKSCOPE_BUILD: mul_mat_vec_f ran"; exit 1; fi
echo "$BACKSCOPE_BUILD: no mul_mat_vec_f"; exit 0
