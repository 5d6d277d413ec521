#!/usr/bin/env bash
# Benchmark: the Vulkan layer's host cost per dispatch in instructions (valgrind's callgrind), which, unlike
# wall-clock time, does not move with the load of a shared machine. bench/vklayer/dispatch_loop.c records DISPATCHES
# dispatches per command buffer (32: about what ggml-vulkan submits per command buffer while decoding a small model)
# and submits it, ROUNDS times, plain and labelled as ggml-vulkan labels under GGML_VK_DEBUG_MARKERS; each layer build
# runs observing and paused (its switch, what bench/gpu/vk_overhead_ab.sh's plain arm is). For every recording and
# submission hook the cost is its inclusive instruction count minus what it forwards to (the loader and the driver):
# the layer's own work, lookups included. Observing minus paused is what observing costs.
# Usage: bench/vklayer_instructions.sh LAYER_SO [LAYER_SO …] (e.g. an older build first, then
#        target/release/libbackscope_vklayer.so); DISPATCHES=32 ROUNDS=300 by default.
set -euo pipefail
cd "$(dirname "$0")/.."
DISPATCHES="${DISPATCHES:-32}"
ROUNDS="${ROUNDS:-300}"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
[ -n "${KEEP:-}" ] && trap 'mkdir -p "$KEEP" && cp "$WORK"/cg.* "$KEEP"/; rm -rf "$WORK"' EXIT
glslc -O bench/vklayer/noop.comp -o "$WORK/noop.spv"
cc -O2 -g -o "$WORK/dispatch_loop" bench/vklayer/dispatch_loop.c -lvulkan -ldl
n=0
for so in "$@"; do
  n=$((n + 1))
  # The paused arm finds the layer by its file name (libbackscope_vklayer*).
  mkdir -p "$WORK/$n/lib" "$WORK/$n/manifest" "$WORK/$n/trace"
  cp "$so" "$WORK/$n/lib/libbackscope_vklayer.so"
  printf '{"file_format_version":"1.1.2","layer":{"name":"VK_LAYER_BACKSCOPE_dispatch","type":"GLOBAL","library_path":"%s","api_version":"1.3.0","implementation_version":"1","description":"backscope","functions":{"vkNegotiateLoaderLayerInterfaceVersion":"vkNegotiateLoaderLayerInterfaceVersion"}}}\n' \
    "$WORK/$n/lib/libbackscope_vklayer.so" >"$WORK/$n/manifest/VkLayer_backscope_dispatch.json"
  for labelled in 1 0; do
    for arm in observing paused; do
      paused=""; [ "$arm" = paused ] && paused=1
      DISPATCH_LOOP_PAUSED=$paused VK_ADD_LAYER_PATH="$WORK/$n/manifest" VK_INSTANCE_LAYERS=VK_LAYER_BACKSCOPE_dispatch \
        BACKSCOPE_TRACE_DIR="$WORK/$n/trace" valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.$n.$labelled.$arm" \
        "$WORK/dispatch_loop" "$WORK/noop.spv" "$DISPATCHES" "$ROUNDS" "$labelled" >/dev/null 2>"$WORK/cg.$n.$labelled.$arm.log"
    done
  done
done
python3 - "$WORK" "$DISPATCHES" "$ROUNDS" "$@" <<'PY'
import re, subprocess, sys
work, dispatches, rounds, sos = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
# Exclusive instructions of the layer's own code, inlined parts included (callgrind lists those under the file they
# come from, so only sums over every entry are independent of how entries are grouped); libc calls the layer makes
# (strnlen for labels) are not included.
own = re.compile(r"^\s*([\d,]+) \([^)]*\)\s+\S*:(\S*(backscope_vklayer|trace_format)::\S*)")
area = {"api::recording": "recording", "commands::": "recording+submit", "labels::": "recording",
        "api::calls": "submit", "locus::": "submit"}

def layer_ir(path):
    out = subprocess.run(["callgrind_annotate", "--auto=no", "--threshold=100", path],
                         capture_output=True, text=True, check=True).stdout
    return sum(int(m.group(1).replace(",", "")) for m in map(own.match, out.splitlines()) if m)

print(f"layer instructions per dispatch ({dispatches} dispatches per submission, {rounds} submissions; "
      "observing - paused)")
for n, so in enumerate(sos, 1):
    for labelled, case in ((1, "labelled as ggml-vulkan with GGML_VK_DEBUG_MARKERS"), (0, "plain")):
        obs, paused = (layer_ir(f"{work}/cg.{n}.{labelled}.{arm}") for arm in ("observing", "paused"))
        per = lambda ir: ir / (dispatches * rounds)
        print(f"{so} [{case}]: observing {per(obs):.0f}, paused {per(paused):.0f}, "
              f"observing - paused {per(obs - paused):.0f} instructions per dispatch")
PY
