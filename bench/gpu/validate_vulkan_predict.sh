#!/usr/bin/env bash
# Validate `backscope predict --backend vulkan` on an NVIDIA GPU through NVIDIA's Vulkan driver:
#   1. unpack Debian's Vulkan loader (carried .debs) and point it at the NVIDIA ICD (as validate_vulkan.sh does);
#   2. `backscope synth` a TinyLlama-1.1B-shaped model (F16), quantize it to Q4_K_M and Q8_0 with the build's
#      llama-quantize;
#   3. for each model, prompts of 1, 8, 9, 64, 100 and 512 tokens (each its own llama-bench run, -n 0) and a 16-token
#      decode (-p 0 -n 16): llama-bench under `backscope trace` with the Vulkan layer (ggml's debug markers name the
#      pipelines), then `backscope predict --backend vulkan --device TRACE --trace TRACE` (the device from the layer's
#      device record, the build from the libggml-vulkan.so the pipelines came from): every item must be Confirmed,
#      with no unexplained pipeline;
#   4. a deliberately wrong device (`--device gfx900-radv`, GCN wave64) against the same traces must come out
#      Contradicted in some case of each model (the rules are not vacuous). A single case may coincide (F16 and Q8_0
#      run the same pipelines on both devices at some sizes): that is its own line, not a failure of the case.
# The device's shader core count (split-k reads it) comes from the layer's device record (shader_core_count, from
# VK_NV_shader_sm_builtins); each case's JSON says where predict took it from.
# Usage: [CASES="p1 p8 p9 p64 p100 p512 tg16"] [MODELS="f16 q4km q8"] bench/gpu/validate_vulkan_predict.sh CARRY_DIR OUT_DIR
#   CARRY_DIR holds: backscope, libbackscope_vklayer.so (x86-64 builds), llama/ (the bin directory of
#   scripts/llama-build.sh vulkan, not stripped: its embedded shader names give the build's glslc support), debs/
#   (libvulkan1 from Debian bookworm, `apt-get download`), and ggml-vocab-llama-spm.gguf.
# Results: OUT_DIR/summary.txt (one line per case: confirmed / contradicted / unobserved / unexplained),
# OUT_DIR/vulkan-predict.json (per case: the verdicts and the device decisions), OUT_DIR/raw.tar.gz (predictions,
# trace files, llama-bench output).
set -euo pipefail
CARRY=$(realpath "$1")
OUT=$(realpath "$2")
W=/tmp/bsvkp
mkdir -p "$W/raw" "$OUT"
BS="$CARRY/backscope"
LAYER="$CARRY/libbackscope_vklayer.so"
BIN="$CARRY/llama"
chmod +x "$BS" "$BIN"/llama-* 2>/dev/null || true
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/summary.txt" >&2; }

log "Vulkan loader and NVIDIA ICD"
for f in "$CARRY"/debs/*.deb; do dpkg -x "$f" /; done
ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export LD_LIBRARY_PATH="$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
"$BIN/llama-bench" --list-devices >"$W/raw/devices.txt" 2>&1 || true
log "devices: $(grep -i vulkan "$W/raw/devices.txt" | tr '\n' ' ')"

log "models: TinyLlama-1.1B shape, F16, Q4_K_M, Q8_0"
"$BS" synth --preset tinyllama-1.1b --type f16 --vocab "$CARRY/ggml-vocab-llama-spm.gguf" -o "$W/tl-f16.gguf" \
  >"$W/raw/synth.log" 2>&1
"$BIN/llama-quantize" "$W/tl-f16.gguf" "$W/tl-q4km.gguf" Q4_K_M >>"$W/raw/synth.log" 2>&1
"$BIN/llama-quantize" "$W/tl-f16.gguf" "$W/tl-q8.gguf" Q8_0 >>"$W/raw/synth.log" 2>&1

failed=0
results=()
# Whether the wrong profile was contradicted anywhere. Per model it may not be: F16 and Q8_0 run both mat-vec
# reduction variants under one debug name on NVIDIA, and a comparison by name accepts either (see docs/predict.md).
wrong_anywhere=0
for model in ${MODELS:-f16 q4km q8}; do
  wrong_caught=0
  for case in ${CASES:-p1 p8 p9 p64 p100 p512 tg16}; do
    case $case in
      tg16) bench=(-p 0 -n 16); tokens=(--prompt-tokens 0 --decode-tokens 16) ;;
      *) bench=(-p "${case#p}" -n 0); tokens=(--prompt-tokens "${case#p}" --decode-tokens 0) ;;
    esac
    name="vkp-$model-$case"
    rm -rf "$W/$name"
    "$BS" trace --dir "$W/$name" --vklayer "$LAYER" -- \
      "$BIN/llama-bench" -m "$W/tl-$model.gguf" -ngl 99 -r 1 "${bench[@]}" >"$W/raw/$name.out" 2>&1 ||
      log "trace $name exit $?"
    "$BS" predict --json --backend vulkan --device "$W/$name" --trace "$W/$name" --model "$W/tl-$model.gguf" \
      "${tokens[@]}" >"$W/raw/$name.predict.json" 2>>"$W/raw/$name.out" || log "predict $name exit $?"
    "$BS" predict --json --backend vulkan --device gfx900-radv --vulkan-lib "$BIN/libggml-vulkan.so" \
      --trace "$W/$name" --model "$W/tl-$model.gguf" "${tokens[@]}" >"$W/raw/$name.wrong.json" 2>>"$W/raw/$name.out" ||
      log "predict (wrong device) $name exit $?"
    line=$(python3 - "$W/raw/$name.predict.json" "$W/raw/$name.wrong.json" "$name" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
c = r["comparison"]
w = json.load(open(sys.argv[2]))["comparison"]
ok = c["contradicted"] == 0 and c["unobserved"] == 0 and not c["unexplained"] and c["confirmed"] > 0
wrong_caught = w["contradicted"] > 0
print(json.dumps({
    "case": sys.argv[3], "ok": ok, "wrong_device_contradicted": wrong_caught,
    "confirmed": c["confirmed"], "contradicted": c["contradicted"], "unobserved": c["unobserved"],
    "unexplained": [u["name"] for u in c["unexplained"]],
    "not_confirmed": [[i["phase"], i["ggml_type"], i["predicted"], i["verdict"], i["note"]] for i in c["items"] if i["verdict"] != "Confirmed"],
    "device": r["device"]["label"], "profile": r["device"].get("profile"),
    "shader_core_count": r["device"]["facts"].get("shader_core_count"),
    "shader_core_count_from": r["device"].get("shader_core_count_from"),
    "decisions": {d["table"]: d["value"] for d in r["device_decisions"]},
}))
PY
) || line="{\"case\":\"$name\",\"ok\":false}"
    results+=("$line")
    case "$line" in *'"ok": true'*) log "$name: all Confirmed" ;;
      *) failed=1; log "$name: NOT all Confirmed: $line" ;; esac
    # The wrong profile is judged per model: one case where it predicts the same pipelines is no failure.
    case "$line" in *'"wrong_device_contradicted": true'*) wrong_caught=1; log "$name: gfx900 profile contradicted" ;;
      *) log "$name: gfx900 profile not contradicted in this case (it predicts the pipelines this case ran)" ;; esac
  done
  if [ "$wrong_caught" = 1 ]; then
    wrong_anywhere=1
    log "$model: the gfx900 profile is contradicted in some case"
  else
    log "$model: the gfx900 profile was not contradicted for this model (its pipelines coincide by name)"
  fi
done
if [ "$wrong_anywhere" = 0 ]; then
  failed=1
  log "the gfx900 profile was NEVER contradicted (the rules did not tell the devices apart)"
fi
printf '%s\n' "${results[@]}" | python3 -c 'import json,sys; json.dump([json.loads(l) for l in sys.stdin], open(sys.argv[1], "w"), indent=1)' \
  "$OUT/vulkan-predict.json"
for d in "$W"/vkp-*; do [ -d "$d" ] && cp -r "$d" "$W/raw/$(basename "$d").traces"; done
tar -czf "$OUT/raw.tar.gz" -C "$W" raw
log "$([ $failed = 0 ] && echo 'every case Confirmed' || echo 'some case NOT Confirmed')"
exit $failed
