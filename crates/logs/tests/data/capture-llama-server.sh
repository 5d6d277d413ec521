#!/usr/bin/env bash
# Re-capture the llama-server fixtures of this directory (see README.md):
#
#   crates/logs/tests/data/capture-llama-server.sh BIN_DIR MODEL.gguf OUT_DIR
#
# BIN_DIR: llama.cpp 11434's bin directory (`scripts/llama-build.sh vulkan` prints it); MODEL: a tiny model
# (`backscope synth --preset tiny --type f16 -o MODEL`). Writes three logs into OUT_DIR:
#   llama-server-cpu.log            --device none, default log prefix, colours forced on, one /completion;
#   llama-server-vulkan.log         Vulkan0 (lavapipe), -ngl 99, Ollama's --no-log-prefix --no-log-timestamps;
#   llama-server-vulkan-sigsegv.log Vulkan0, default prefix, killed with SIGSEGV while decoding a request
#                                   (after llama-server's first `n_gen = …` progress line, printed at 100 tokens).
# Every server started here is stopped by its PID.
set -euo pipefail
BIN="$1" MODEL="$2" OUT="$3"
mkdir -p "$OUT"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wait_ready() { # PORT PID
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.2
  done
  return 1
}

stop() { # PID
  kill -TERM "$1" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$1" 2>/dev/null || true
}

run_one() { # NAME ENV... -- ARGS...
  local name="$1"; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local port; port=$(free_port)
  env "${envs[@]}" "$BIN/llama-server" -m "$MODEL" -lv 4 --port "$port" -c 256 "$@" >"$OUT/$name" 2>&1 &
  local pid=$!
  wait_ready "$port" "$pid"
  curl -sf "http://127.0.0.1:$port/completion" -d '{"prompt":"Hello, my name is","n_predict":4}' >/dev/null
  stop "$pid"
  wait "$pid" 2>/dev/null || true
}

run_one llama-server-cpu.log X=1 -- --device none --log-colors on
run_one llama-server-vulkan.log GGML_VK_VISIBLE_DEVICES=0 -- --device Vulkan0 -ngl 99 --no-log-prefix --no-log-timestamps

# The crash: a request that decodes long enough to be interrupted, then SIGSEGV.
port=$(free_port)
GGML_VK_VISIBLE_DEVICES=0 "$BIN/llama-server" -m "$MODEL" -lv 4 --port "$port" -c 256 --device Vulkan0 -ngl 99 \
  >"$OUT/llama-server-vulkan-sigsegv.log" 2>&1 &
pid=$!
wait_ready "$port" "$pid"
curl -s "http://127.0.0.1:$port/completion" -d '{"prompt":"Hello, my name is","n_predict":400,"ignore_eos":true}' \
  >/dev/null 2>&1 &
curl_pid=$!
for _ in $(seq 1 600); do grep -q 'n_gen = ' "$OUT/llama-server-vulkan-sigsegv.log" && break; sleep 0.1; done
kill -SEGV "$pid"
wait "$pid" 2>/dev/null || echo "llama-server exited with status $? (139 = killed by SIGSEGV)" >&2
wait "$curl_pid" 2>/dev/null || true
