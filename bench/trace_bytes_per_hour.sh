#!/usr/bin/env bash
# Measurement: how many bytes an hour the Vulkan layer's trace of a busy program takes, per window length, for the
# budget and rotation `backscope trace --env` prints for a service left traced (docs/commands.md). A size, not a
# speed: llama-bench (decoding without pause, the busiest a server gets: a graph of every layer per token, submitted
# as the token is made, where a prompt's few large submissions leave most windows empty) on Mesa's lavapipe under
# the layer, once per window length, with ggml's debug labels off as `trace --env` leaves them. The bytes are
# counted over SECONDS after WARM seconds (model load and lavapipe's pipeline compilation write nothing but the
# header and definitions), times 3600 / SECONDS; also the windows written and their mean size, and how many hours
# the three segments `trace --env` keeps (768 MiB of its 1 GiB) hold at that rate.
# Usage: bench/trace_bytes_per_hour.sh LLAMA_BIN_DIR MODEL.gguf [WARM] [SECONDS] [INTERVALS_MS...]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="$1"
MODEL="$2"
WARM="${3:-60}"
SECONDS_PER_RUN="${4:-120}"
shift $(($# < 4 ? $# : 4))
INTERVALS=("$@")
[ ${#INTERVALS[@]} -gt 0 ] || INTERVALS=(50 250 1000)
cargo build --release -q -p backscope-vklayer
LAYER="$PWD/target/release/libbackscope_vklayer.so"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
printf '{"file_format_version":"1.1.2","layer":{"name":"VK_LAYER_BACKSCOPE_dispatch","type":"GLOBAL","library_path":"%s","api_version":"1.3.0","implementation_version":"1","description":"backscope","functions":{"vkNegotiateLoaderLayerInterfaceVersion":"vkNegotiateLoaderLayerInterfaceVersion"}}}\n' \
  "$LAYER" >"$WORK/VkLayer_backscope_dispatch.json"
# Bytes and window lines of the trace files in $1, tab-separated.
measure() { printf '%s\t%s\n' "$(cat "$1"/trace-*.jsonl 2>/dev/null | wc -c)" "$(cat "$1"/trace-*.jsonl 2>/dev/null | grep -c '^{"window"' || true)"; }
printf 'interval_ms\tseconds\tbytes\twindows\tbytes_per_window\tbytes_per_hour\thours_in_768MiB\n'
for interval in "${INTERVALS[@]}"; do
  dir="$WORK/trace-$interval"
  mkdir -p "$dir"
  VK_ADD_LAYER_PATH="$WORK" VK_INSTANCE_LAYERS=VK_LAYER_BACKSCOPE_dispatch BACKSCOPE_TRACE_DIR="$dir" \
    BACKSCOPE_TRACE_INTERVAL_MS="$interval" GGML_VK_VISIBLE_DEVICES=0 \
    "$BIN/llama-bench" -m "$MODEL" -ngl 99 -p 0 -n 128 -r 100000 >/dev/null 2>&1 &
  pid=$!
  sleep "$WARM"
  read -r b0 w0 < <(measure "$dir")
  t0=$(date +%s.%N)
  sleep "$SECONDS_PER_RUN"
  read -r b1 w1 < <(measure "$dir")
  t1=$(date +%s.%N)
  kill "$pid"
  wait "$pid" || true
  awk -v i="$interval" -v t="$(echo "$t1 - $t0" | bc)" -v b="$((b1 - b0))" -v w="$((w1 - w0))" 'BEGIN {
    rate = b / t * 3600;
    printf "%d\t%.1f\t%d\t%d\t%.0f\t%.0f\t%.1f\n", i, t, b, w, (w > 0 ? b / w : 0), rate, (rate > 0 ? 768 * 1048576 / rate : 0)
  }'
done
