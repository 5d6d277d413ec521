#!/usr/bin/env bash
# Validate the Vulkan layer's crash locus on an NVIDIA GPU through NVIDIA's Vulkan driver (issue 20, item 3):
#   1. unpack Debian's Vulkan loader (carried .debs) and point the loader at the NVIDIA ICD, as validate_vulkan.sh;
#   2. `backscope synth` a TinyLlama-1.1B-shaped model (F16) and quantize it to Q4_K_M;
#   3. per model, llama-bench (prompt 512, decode 64, many repetitions) under the layer with ggml's debug markers, once
#      without the layer (the control), sent SIGSEGV after DELAY seconds of work, then SIGABRT likewise: the process
#      must die by the same signal with and without the layer, its stdout must be the same up to the kill, and the
#      layer's trace must end with a fatal crash record whose queues name ggml-vulkan pipelines (each mapped to an op
#      by `backscope trace --read`, i.e. data/vulkan_pipelines.toml) that the trace's windows counted, and whose
#      window was flushed first;
#   4. the same under `backscope trace` with the CUDA observer loaded too: one merged `trace.crash` claim, Confirmed,
#      saying "the last Vulkan dispatches before the crash were: …".
# Usage: [DELAY=3] bench/gpu/validate_vulkan_crash.sh CARRY_DIR OUT_DIR   (CARRY_DIR as for validate_vulkan.sh)
# Results: OUT_DIR/summary.txt (one line per case: PASS/FAIL and the claim), OUT_DIR/raw.tar.gz (traces, summaries).
set -euo pipefail
CARRY=$(realpath "$1")
OUT=$(realpath "$2")
W=/tmp/bsvkcrash
mkdir -p "$W/raw" "$OUT"
BS="$CARRY/backscope"
LAYER="$CARRY/libbackscope_vklayer.so"
OBS="$CARRY/libbackscope_observer.so"
BIN="$CARRY/llama"
DELAY="${DELAY:-3}"
chmod +x "$BS" "$BIN"/llama-* 2>/dev/null || true
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/summary.txt" >&2; }

for f in "$CARRY"/debs/*.deb; do dpkg -x "$f" /; done
ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
export LD_LIBRARY_PATH="$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$OUT/summary.txt" 2>&1 || true

"$BS" synth --preset tinyllama-1.1b --type f16 --vocab "$CARRY/ggml-vocab-llama-spm.gguf" -o "$W/tl-f16.gguf" \
  >"$W/raw/synth.log" 2>&1
"$BIN/llama-quantize" "$W/tl-f16.gguf" "$W/tl-q4km.gguf" Q4_K_M >>"$W/raw/synth.log" 2>&1

# The layer's manifest, as `backscope trace --env` writes it.
MANIFEST="$W/manifest"
mkdir -p "$MANIFEST"
printf '{"file_format_version":"1.1.2","layer":{"name":"VK_LAYER_BACKSCOPE_dispatch","type":"GLOBAL","library_path":"%s","api_version":"1.3.0","implementation_version":"1","description":"backscope","functions":{"vkNegotiateLoaderLayerInterfaceVersion":"vkNegotiateLoaderLayerInterfaceVersion"}}}\n' \
  "$LAYER" >"$MANIFEST/VkLayer_backscope_dispatch.json"

# Runs llama-bench (with the layer when $1 is "layer"), kills it with signal $2 after DELAY s; prints its exit status.
bench_killed() {
  local arm=$1 sig=$2 model=$3 dir=$4
  mkdir -p "$dir"
  local env=(GGML_VK_DEBUG_MARKERS=1)
  [ "$arm" = layer ] && env+=(VK_ADD_LAYER_PATH="$MANIFEST" VK_INSTANCE_LAYERS=VK_LAYER_BACKSCOPE_dispatch BACKSCOPE_TRACE_DIR="$dir")
  env "${env[@]}" "$BIN/llama-bench" -m "$model" -ngl 99 -p 512 -n 64 -r 1000 >"$dir.stdout" 2>"$dir.stderr" &
  local pid=$!
  sleep "$DELAY"
  kill "-$sig" "$pid"
  set +e
  wait "$pid"
  echo $?
  set -e
}

fails=0
for model in f16 q4km; do
  for sig in SEGV ABRT; do
    name="$model-$sig"
    plain=$(bench_killed plain "$sig" "$W/tl-$model.gguf" "$W/$name-plain")
    layered=$(bench_killed layer "$sig" "$W/tl-$model.gguf" "$W/$name-layer")
    "$BS" trace --json --read "$W/$name-layer" >"$W/$name.summary.json" 2>"$W/$name.read.log" || true
    cp -r "$W/$name-layer" "$W/raw/$name.traces"
    cp "$W/$name.summary.json" "$W/raw/"
    verdict=$(python3 - "$W/$name.summary.json" "$W/$name-layer" "$plain" "$layered" "SIG$sig" <<'PY'
import glob, json, sys
summary, tdir, plain, layered, sig = sys.argv[1:6]
problems = []
if plain != layered:
    problems.append(f"exit status {layered} with the layer, {plain} without")
lines = [json.loads(l) for f in glob.glob(tdir + "/trace-*.jsonl") for l in open(f)]
kernels = {l["kernel"]: l["name"] for l in lines if "kernel" in l}
counted = {k for l in lines if "window" in l for k, _ in l.get("counts", [])}
crashes = [l for l in lines if "crash" in l]
if not crashes:
    problems.append("no crash record")
else:
    c = crashes[-1]
    if c["signal"] != sig:
        problems.append(f"crash record says {c['signal']}")
    if not c.get("flushed"):
        problems.append("the window was not flushed first")
    ds = [d for q in c.get("queues", []) for d in q["dispatches"]]
    if not ds:
        problems.append("no queue dispatches in the crash record")
    for d in ds:
        if d[0] not in counted:
            problems.append(f"{kernels.get(d[0])} remembered but not counted")
s = json.load(open(summary))
ops = {k["name"]: k.get("op") for k in s["kernels"]}
for q in s.get("crashes", [{}])[-1:][0].get("vulkan", []):
    for d in q["dispatches"]:
        if not d.get("op"):
            problems.append(f"{d['name']}: no op")
claim = next((c for c in s["claims"] if c["id"].startswith("trace.crash")), None)
if claim is None or "the last Vulkan dispatches before the crash were" not in claim["statement"]:
    problems.append("no claim naming the last Vulkan dispatches")
print(("PASS" if not problems else "FAIL " + "; ".join(problems[:5])) + " | " + (claim["statement"] if claim else ""))
PY
)
    case $verdict in PASS*) ;; *) fails=$((fails + 1)) ;; esac
    log "$name: exit plain $plain, layer $layered: $verdict"
  done
done

# Under `backscope trace` with the CUDA observer too: the two crash records of the signal are one claim.
mkdir -p "$W/merged"
GGML_VK_DEBUG_MARKERS=1 "$BS" trace --json --dir "$W/merged" --observer "$OBS" --vklayer "$LAYER" -- \
  "$BIN/llama-bench" -m "$W/tl-q4km.gguf" -ngl 99 -p 512 -n 64 -r 1000 >"$W/raw/merged.out" 2>"$W/raw/merged.err" &
tracer=$!
sleep "$((DELAY + 2))"
# The traced command is backscope's child: signal it by its pid.
bench_pid=$(pgrep -P "$tracer" | head -n 1)
[ -n "$bench_pid" ] && kill -SEGV "$bench_pid"
wait "$tracer" || true
cp -r "$W/merged" "$W/raw/merged.traces"
merged=$(tail -n 1 "$W/raw/merged.out" | python3 -c '
import json, sys
s = json.load(sys.stdin)
c = [c for c in s["claims"] if c["id"].startswith("trace.crash")]
ok = len(c) == 1 and c[0]["confidence"] == "Confirmed" and "the last Vulkan dispatches before the crash were" in c[0]["statement"]
print(("PASS " if ok else "FAIL ") + " || ".join(x["statement"] for x in c))' || echo "FAIL: no summary")
case $merged in PASS*) ;; *) fails=$((fails + 1)) ;; esac
log "backscope trace with the observer: $merged"
tar -czf "$OUT/raw.tar.gz" -C "$W" raw
log "$([ $fails = 0 ] && echo 'every case PASS' || echo "$fails case(s) FAIL")"
