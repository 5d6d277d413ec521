#!/usr/bin/env bash
# One case of the isolation table in README.md: llama-server on MODEL with -ngl NGL under `backscope trace` (with the
# remaining arguments, e.g. `--impersonate gfx900-radv` or `--impersonate variant.json`), one completion of a
# 101-token prompt and NPRED tokens, then SIGTERM; prints the traced command's exit status (139: SIGSEGV).
#   docs/validation/study-crash-2026-12-02/isolate.sh NAME PORT MODEL NGL NPRED [trace args…]
# Env: EXTRA (more llama-server arguments, e.g. "-fa off"); GGML_VK_* variables pass through to llama-server.
# Writes OUT (default /tmp/backscope-isolate)/NAME{.json,.log,.completion} and the trace in OUT/NAME/.
set -u
NAME=$1 PORT=$2 MODEL=$3 NGL=$4 NPRED=$5
shift 5
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
B="$ROOT/target/debug/backscope"
LAYER="$ROOT/target/debug/libbackscope_vklayer.so"
BIN="${LLAMA_BIN:-$HOME/.cache/backscope/llama.cpp/11434-vulkan/bin}"
OUT="${OUT:-/tmp/backscope-isolate}"
mkdir -p "$OUT"
rm -rf "${OUT:?}/$NAME"
# shellcheck disable=SC2086 # EXTRA is a list of arguments
GGML_VK_VISIBLE_DEVICES=0 "$B" trace --json --vklayer "$LAYER" --dir "$OUT/$NAME" "$@" -- "$BIN/llama-server" \
  -m "$MODEL" -ngl "$NGL" -c 4096 -b 512 -ub 512 -np 1 ${EXTRA:-} --host 127.0.0.1 --port "$PORT" \
  >"$OUT/$NAME.json" 2>"$OUT/$NAME.log" &
tracer=$!
for _ in $(seq 1 300); do
  kill -0 "$tracer" 2>/dev/null || break
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
  sleep 1
done
prompt=$(printf 'The quick brown fox jumps over the lazy dog. %.0s' $(seq 1 10))
curl -s --max-time 900 "http://127.0.0.1:$PORT/completion" \
  -d "{\"prompt\": \"$prompt\", \"n_predict\": $NPRED, \"cache_prompt\": false}" >"$OUT/$NAME.completion"
server=$(pgrep -P "$tracer" -x llama-server || true)
[ -n "$server" ] && kill -TERM "$server"
wait "$tracer"
echo "$NAME exit=$?"
