#!/usr/bin/env bash
# Validate `backscope predict --run` for ggml-vulkan (placement included) on an NVIDIA GPU through NVIDIA's Vulkan
# driver, as tests/predict/vulkan_run.rs does on lavapipe:
#   1. unpack Debian's Vulkan loader (carried .debs) and point it at the NVIDIA ICD (as validate_vulkan.sh does);
#   2. `backscope synth` a TinyLlama-1.1B-shaped model (22 layers, F16) and quantize it to Q4_K_M;
#   3. `backscope sweep --trace` of the Vulkan llama-server (GGML_VK_PERF_LOGGER=1) at num_gpu 0, 10 (layers 13-21 and
#      the output layer) and -1, prompts of about 8, 64 and 512 tokens, 8 generated tokens, 2 repetitions;
#   4. `backscope predict --json --run RUN_DIR` with no other flag: each record by ggml-vulkan's rules for the
#      device its own trace recorded (shader core count from the layer's record), with its num_gpu and prompt;
#   5. per record of repetition 2: the predicted matmul dispatches per (op, type) on the device against
#      GGML_VK_PERF_LOGGER's nodes in the record's log slice (ggml's own count, independent of backscope);
#   6. a deliberately wrong placement (--num-gpu 1 on the num_gpu-10 records) must come out Contradicted.
# Expected: every record's items and counts Confirmed, nothing unexplained, perf-logger nodes equal to the prediction,
# and the wrong placement Contradicted. What it proves: placement (which layers, op offload of the 64/512-token
# prompts' CPU-resident weights) and the per-request dispatch counts hold on NVIDIA's driver, not only on lavapipe.
# Usage: [NGLS="0,10,-1"] [PROMPTS="8,64,512"] [NO_PERF=1] bench/gpu/validate_vulkan_run.sh CARRY_DIR OUT_DIR
#   NO_PERF=1: no GGML_VK_PERF_LOGGER (the layer's counts are then the only check of the counts).
#   CARRY_DIR holds: backscope, libbackscope_vklayer.so, libbackscope_observer.so (x86-64 builds), llama/ (the bin
#   directory of scripts/llama-build.sh vulkan, not stripped), debs/ (libvulkan1 from Debian bookworm), and
#   ggml-vocab-llama-spm.gguf.
# Results: OUT_DIR/summary.txt (one line per record), OUT_DIR/predict-run.json, OUT_DIR/wrong.json,
#   OUT_DIR/perf-vs-predicted.json, OUT_DIR/run.tar.gz (the run directory: records, traces, log slices).
set -euo pipefail
CARRY=$(realpath "$1")
mkdir -p "$2"
OUT=$(realpath "$2")
W=${WORK_DIR:-/tmp/bsvkr}
mkdir -p "$W"
BS="$CARRY/backscope"
LAYER="$CARRY/libbackscope_vklayer.so"
OBS="$CARRY/libbackscope_observer.so"
BIN="$CARRY/llama"
chmod +x "$BS" "$BIN"/llama-* 2>/dev/null || true
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/summary.txt" >&2; }

log "Vulkan loader and NVIDIA ICD"
for f in "$CARRY"/debs/*.deb; do dpkg -x "$f" /; done
ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export LD_LIBRARY_PATH="$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

log "model: TinyLlama-1.1B shape, Q4_K_M"
"$BS" synth --preset tinyllama-1.1b --type f16 --vocab "$CARRY/ggml-vocab-llama-spm.gguf" -o "$W/tl-f16.gguf" \
  >"$W/synth.log" 2>&1
"$BIN/llama-quantize" "$W/tl-f16.gguf" "$W/tl-q4km.gguf" Q4_K_M >>"$W/synth.log" 2>&1

log "sweep: num_gpu ${NGLS:-0,10,-1}, prompts ${PROMPTS:-8,64,512}"
rm -rf "$W/runs" "$W/bs.db"
# ggml-vulkan tests only whether the variable is set, so NO_PERF leaves it out.
perf_env=(--env "vulkan:GGML_VK_PERF_LOGGER=1")
[ -n "${NO_PERF:-}" ] && perf_env=()
"$BS" sweep --json --db "$W/bs.db" --runs-dir "$W/runs" \
  --server "vulkan=llama-server:--device,Vulkan0" "${perf_env[@]}" \
  --llama-bin "$BIN" --model "$W/tl-q4km.gguf" --num-gpu "${NGLS:-0,10,-1}" --prompt-tokens "${PROMPTS:-8,64,512}" \
  --num-predict 8 --repetitions 2 --read-timeout 600 \
  --trace --observer "$OBS" --vklayer "$LAYER" >"$W/sweep.jsonl" 2>"$W/sweep.err" || log "sweep exit $?"
RUN=$(ls -d "$W"/runs/*/ | head -1)
log "run: $RUN"

"$BS" predict --json --run "$RUN" >"$OUT/predict-run.json" 2>"$W/predict.err" || log "predict --run exit $?"
WRONG=$(python3 -c "
import json,glob
for f in sorted(glob.glob('$RUN/cells/*/result.json')):
    r=json.load(open(f))
    if r['num_gpu']==10 and r['repetition']==2: print(r['seq']); break
")
"$BS" predict --json --run "$RUN" --cell "$WRONG" --num-gpu 1 >"$OUT/wrong.json" 2>>"$W/predict.err" ||
  log "predict (wrong num_gpu) exit $?"

python3 - "$RUN" "$OUT" <<'PY' | tee -a "$OUT/summary.txt"
import json, os, sys
run, out = sys.argv[1], sys.argv[2]
d = json.load(open(os.path.join(out, "predict-run.json")))
def perf(text):
    nodes = {}
    for line in text.splitlines():
        name, _, rest = line.partition(": ")
        if " x " not in rest:
            continue
        try:
            count = int(rest.split(" x ")[0])
        except ValueError:
            continue
        t = name.split(" ")
        i = 1 if len(t) > 1 and t[1].replace("_", "").isupper() and t[1].replace("_", "").isalpha() else 0
        # MUL_MAT_ID's vector path is its own node name; both count MUL_MAT_ID nodes.
        op = {"MUL_MAT_ID_VEC": "MUL_MAT_ID"}.get(t[i] if len(t) > i else "", t[i] if len(t) > i else "")
        if len(t) > i + 1 and op in ("MUL_MAT", "MUL_MAT_VEC", "MUL_MAT_ID"):
            key = f"{op} {t[i+1].upper()}"
            nodes[key] = nodes.get(key, 0) + count
    return nodes
ok_all, table = True, []
for c in d["cells"]:
    r = c["report"]; cmp = r["comparison"]
    rec = json.load(open(os.path.join(run, c["file"])))
    pred = {}
    for p in r["phases"]:
        for g in p["weights"]:
            if g["placement"]["runs_on"] == "GPU":
                k = f'{g["op"]} {g["ggml_type"]}'
                # Nodes, as the perf logger counts them (MUL_MAT_ID's per-token path dispatches more).
                pred[k] = pred.get(k, 0) + g["nodes"]
    perf_ok = None
    if rec["repetition"] == 2 and rec.get("log_slice") and not os.environ.get("NO_PERF"):
        nodes = perf(open(os.path.join(run, rec["log_slice"])).read())
        perf_ok = nodes == pred
        table.append({"seq": c["seq"], "num_gpu": c["num_gpu"], "predicted": pred, "perf_logger": nodes})
    counts_ok = all(n["verdict"] == "Confirmed" for n in cmp.get("counts", []))
    complete = cmp["observed"]["complete"]
    ok = cmp["contradicted"] == 0 and not cmp["unexplained"] and counts_ok and perf_ok is not False
    ok_all &= ok
    # A record lists its 20 most dispatched pipelines: beyond that, counts are not judged and items may be
    # Unobserved (said, not a failure).
    print(f'{"OK " if ok else "BAD"}{"" if complete else " (incomplete record: counts not judged)"} seq {c["seq"]} num_gpu {c["num_gpu"]} prompt {r["tokens"].get("prompt_tokens")}: '
          f'{cmp["confirmed"]} confirmed, {cmp["contradicted"]} contradicted, {cmp["unobserved"]} unobserved, '
          f'{len(cmp["unexplained"])} unexplained, counts {"ok" if counts_ok else "DIFFER"}, perf logger '
          f'{"-" if perf_ok is None else ("equal" if perf_ok else "DIFFERS")}')
# A cell that failed has no record to predict: say so, and it is not "ALL OK" (on NVIDIA's driver ggml-vulkan's perf
# logger asserts at ggml-vulkan.cpp:14242 with op offload of CPU-resident weights: docs/validation/
# gpu-2026-11-26-vulkan2/README.md; run those cells with NO_PERF=1).
import glob
for f in sorted(glob.glob(os.path.join(run, "cells", "*", "result.json"))):
    rec = json.load(open(f))
    if rec.get("status") != "ok":
        ok_all = False
        print(f'BAD seq {rec["seq"]} num_gpu {rec["num_gpu"]}: the cell failed ({rec.get("error_class")}): {(rec.get("error") or "")[:160]}')
json.dump(table, open(os.path.join(out, "perf-vs-predicted.json"), "w"), indent=1)
w = json.load(open(os.path.join(out, "wrong.json")))["cells"][0]["report"]["comparison"]
print(f'{"OK " if w["contradicted"] > 0 else "BAD"} wrong placement (--num-gpu 1 on a num_gpu-10 record): '
      f'{w["contradicted"]} contradicted')
print("ALL OK" if ok_all and w["contradicted"] > 0 else "FAILURES")
PY
tar czf "$OUT/run.tar.gz" -C "$(dirname "$RUN")" "$(basename "$RUN")"
