#!/usr/bin/env bash
# Benchmark: what `backscope sweep` adds to a request, against curl making the same requests to the same
# llama-server. For every request both tools' client-side time is compared with the server-reported total
# (timings.prompt_ms + timings.predicted_ms); the difference is the per-request overhead outside the model: HTTP,
# JSON, the server's own request handling, and the client. The harness's share is backscope's overhead minus
# curl's. Goal: backscope's median overhead within 1 ms of curl's.
#
# One llama-server (CPU backend, the synthesized tiny model, -lv 4 as backscope's managed servers run) serves both
# tools; requests are non-streamed and streamed, identical bodies, prompt cache off, N of each per tool, after a
# warm-up, the two tools alternating request by request. curl's time is its own `time_total` (process start
# excluded), backscope's is the record's `wall_ms` (one `backscope sweep` process per request).
# Also printed: backscope's bookkeeping per cell outside the request (SQLite commit, result.json, event stream).
#
# Usage: bench/sweep_overhead.sh [N]   (default 40; needs scripts/llama-build.sh vulkan, curl, python3)
set -euo pipefail
cd "$(dirname "$0")/.."
N="${1:-40}"
CACHE="${BACKSCOPE_CACHE:-$HOME/.cache/backscope}"
LLAMA_BIN="${BACKSCOPE_LLAMA_BIN:-$CACHE/llama.cpp/11434-vulkan-glslc2026.4-clang19-O0-outside-ggml/bin}"
[ -x "$LLAMA_BIN/llama-server" ] || { echo "no llama-server in $LLAMA_BIN: run scripts/llama-build.sh vulkan" >&2; exit 2; }
command -v curl >/dev/null || { echo "curl not found: apt-get install curl" >&2; exit 2; }
cargo build --release -q
BIN="${CARGO_TARGET_DIR:-target}/release/backscope"
WORK=$(mktemp -d)
SERVER_PID=
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

"$BIN" synth --preset tiny -o "$WORK/tiny.gguf" >/dev/null
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$LLAMA_BIN/llama-server" -m "$WORK/tiny.gguf" --host 127.0.0.1 --port "$PORT" -ngl 0 --device none -lv 4 --metrics \
  >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 1 600); do
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
  kill -0 "$SERVER_PID" 2>/dev/null || { echo "llama-server exited; log: $WORK/server.log" >&2; cat "$WORK/server.log" >&2; exit 1; }
  sleep 0.1
done
URL="http://127.0.0.1:$PORT"
PREDICT=16
PROMPT="The quick brown fox jumps over the lazy dog"

for mode in whole stream; do
  stream=false; flag=--no-stream
  [ "$mode" = stream ] && { stream=true; flag=; }
  # The exact body backscope sends to /completion (see src/commands/sweep/api.rs).
  printf '{"prompt":"%s","n_predict":%d,"temperature":0.0,"seed":42,"stream":%s,"cache_prompt":false}' \
    "$PROMPT" "$PREDICT" "$stream" >"$WORK/req-$mode.json"
  for _ in 1 2 3 4 5; do # warm-up
    curl -s -o /dev/null -H 'Content-Type: application/json' -d @"$WORK/req-$mode.json" "$URL/completion"
  done
  # Request by request, alternating tools, so that load from elsewhere on the machine hits both alike.
  mkdir -p "$WORK/curl-$mode"
  for i in $(seq 1 "$N"); do
    curl -s -o "$WORK/curl-$mode/$i.body" -w '%{time_total}' -H 'Content-Type: application/json' \
      -d @"$WORK/req-$mode.json" "$URL/completion" >"$WORK/curl-$mode/$i.time"
    # shellcheck disable=SC2086 # $flag is empty or one word
    "$BIN" sweep --quiet $flag --endpoint "bench=$URL" --model tiny --num-predict "$PREDICT" --prompt "$PROMPT" \
      --db "$WORK/$mode.db" --runs-dir "$WORK/runs" >/dev/null
  done
  "$BIN" sweep export --jsonl --db "$WORK/$mode.db" >"$WORK/backscope-$mode.jsonl"
  # Bookkeeping outside the request (commit, result.json, events), from one sweep of N cells in one process.
  start=$(date +%s.%N)
  # shellcheck disable=SC2086
  "$BIN" sweep --quiet $flag --endpoint "bench=$URL" --model tiny --num-predict "$PREDICT" --prompt "$PROMPT" \
    --repetitions "$N" --db "$WORK/batch-$mode.db" --runs-dir "$WORK/runs" >/dev/null
  end=$(date +%s.%N)
  "$BIN" sweep export --jsonl --db "$WORK/batch-$mode.db" >"$WORK/batch-$mode.jsonl"
  echo "$start $end" >"$WORK/elapsed-$mode.txt"
done

python3 - "$WORK" "$N" <<'PY'
import json, statistics, sys
work, n = sys.argv[1], int(sys.argv[2])
med = statistics.median
print(f"{n} requests per tool and mode, 16 tokens, tiny model on llama-server (CPU), same server for both tools")
print(f"{'mode':7} {'tool':10} {'client ms':>10} {'server ms':>10} {'overhead ms':>12}")
results = {}
for mode in ("whole", "stream"):
    curl = []
    for i in range(1, n + 1):
        text = open(f"{work}/curl-{mode}/{i}.body").read()
        # The final object (whole body, or the last `data:` event of the stream) carries the server's timings.
        objs = [json.loads(l[5:]) for l in text.splitlines() if l.startswith("data:") and l[5:].strip() != "[DONE]"]
        t = (objs or [json.loads(text)])[-1]["timings"]
        curl.append((float(open(f"{work}/curl-{mode}/{i}.time").read()) * 1000, t["prompt_ms"] + t["predicted_ms"]))
    recs = [json.loads(l) for l in open(f"{work}/backscope-{mode}.jsonl")]
    bad = [r for r in recs if r["status"] != "ok"]
    if bad:
        sys.exit(f"backscope {mode}: {len(bad)} failed requests, e.g. {bad[0].get('error')}")
    bs = [(r["wall_ms"], r["server_timings"]["total_ms"]) for r in recs]
    for tool, rows in (("curl", curl), ("backscope", bs)):
        ov = [c - s for c, s in rows]
        results[(mode, tool)] = med(ov)
        print(f"{mode:7} {tool:10} {med([c for c, _ in rows]):10.2f} {med([s for _, s in rows]):10.2f} {med(ov):12.3f}")
    start, end = map(float, open(f"{work}/elapsed-{mode}.txt").read().split())
    batch = [json.loads(l) for l in open(f"{work}/batch-{mode}.jsonl")]
    outside = ((end - start) * 1000 - sum(r["wall_ms"] for r in batch)) / len(batch)
    print(f"{mode:7} one sweep of {len(batch)} cells: {outside:.1f} ms per cell outside the request "
          f"(SQLite commit, result.json, events; process start and exit spread over the cells)")
for mode in ("whole", "stream"):
    c, b = results[(mode, "curl")], results[(mode, "backscope")]
    verdict = "within the 1 ms goal" if b - c < 1.0 else "MISSES the 1 ms goal"
    ratio = f"{b / c:.2f}x curl's" if c > 0 else "n/a"
    print(f"{mode}: backscope overhead {b:.3f} ms vs curl {c:.3f} ms: harness adds {b - c:+.3f} ms ({ratio}), {verdict}")
PY
