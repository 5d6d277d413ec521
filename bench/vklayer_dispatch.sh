#!/usr/bin/env bash
# Benchmark: the Vulkan layer's host-side cost per compute dispatch on Mesa's lavapipe. bench/vklayer/dispatch_loop.c
# records DISPATCHES dispatches into one command buffer as ggml-vulkan does (bind, dispatch; alternating pipelines
# and workgroup counts), submits and waits, ROUNDS times per process; each run starts it without the layer (the
# baseline: the loader straight to the driver), with the layer enabled and writing a trace, with the layer enabled
# and paused through its switch (what the in-process A/B bench/gpu/vk_overhead_ab.sh compares the layer with: the
# loader-layer forwarding alone), and once more without it (A/A control). Prints the medians over all rounds after the first (pipeline and cache warm-up) of all runs:
# recording (vkCmdBindPipeline + vkCmdDispatch), the vkQueueSubmit call (where the layer counts what was
# recorded), their sum, and the difference per dispatch. Each run does this twice: plain (bind, dispatch), and
# labelled as ggml-vulkan labels its commands under GGML_VK_DEBUG_MARKERS (a `submit N` region per command buffer,
# a graph-node region and a per-dispatch region around each dispatch: four label calls more per dispatch), which
# the layer follows for the crash locus.
# With LAYER_BEFORE=path/to/an/older/libbackscope_vklayer.so each run also starts it, enabled and tracing (arm
# `before`), so that a change is compared with the build before it in one run: `layer - before`.
# DISPATCHES 32 is what ggml-vulkan submits per command buffer while decoding a small model (about 30 dispatches per
# submission: per-submission costs show there), 20000 the per-dispatch cost alone.
# LAYER=path/to/libbackscope_vklayer.so times that build (the carry's layer, say) instead of building this checkout's.
# DISPATCHES 100 is the most ggml-vulkan records into one command buffer (what its decode mostly submits); there the
# forwarding alone (`paused - baseline`) shows beside what observing adds (`layer - paused`).
# Usage: [LAYER=…] [LAYER_BEFORE=…] bench/vklayer_dispatch.sh [RUNS] [DISPATCHES] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-5}"
DISPATCHES="${2:-20000}"
ROUNDS="${3:-8}"
if [ -z "${LAYER:-}" ]; then
  cargo build --release -q -p backscope-vklayer
  LAYER="${CARGO_TARGET_DIR:-target}/release/libbackscope_vklayer.so"
fi
LAYER=$(realpath "$LAYER")
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
[ -n "${KEEP_ROWS:-}" ] && trap 'cp "$WORK/rows.jsonl" "$KEEP_ROWS"; rm -rf "$WORK"' EXIT
glslc -O bench/vklayer/noop.comp -o "$WORK/noop.spv"
cc -O2 -o "$WORK/dispatch_loop" bench/vklayer/dispatch_loop.c -lvulkan -ldl
mkdir -p "$WORK/manifest" "$WORK/trace" "$WORK/manifest-before" "$WORK/trace-before"
manifest() {
  printf '{"file_format_version":"1.1.2","layer":{"name":"VK_LAYER_BACKSCOPE_dispatch","type":"GLOBAL","library_path":"%s","api_version":"1.3.0","implementation_version":"1","description":"backscope","functions":{"vkNegotiateLoaderLayerInterfaceVersion":"vkNegotiateLoaderLayerInterfaceVersion"}}}\n' \
    "$1" >"$2/VkLayer_backscope_dispatch.json"
}
manifest "$LAYER" "$WORK/manifest"
[ -n "${LAYER_BEFORE:-}" ] && manifest "$(realpath "$LAYER_BEFORE")" "$WORK/manifest-before"
run() { "$WORK/dispatch_loop" "$WORK/noop.spv" "$DISPATCHES" "$ROUNDS" "$2" | sed "s/^{/{\"arm\":\"$1\",/"; }
for _ in $(seq 1 "$RUNS"); do
  for labelled in 0 1; do
    run baseline "$labelled"
    VK_ADD_LAYER_PATH="$WORK/manifest" VK_INSTANCE_LAYERS=VK_LAYER_BACKSCOPE_dispatch BACKSCOPE_TRACE_DIR="$WORK/trace" \
      run layer "$labelled" 2>/dev/null
    DISPATCH_LOOP_PAUSED=1 VK_ADD_LAYER_PATH="$WORK/manifest" VK_INSTANCE_LAYERS=VK_LAYER_BACKSCOPE_dispatch \
      BACKSCOPE_TRACE_DIR="$WORK/trace" run paused "$labelled" 2>/dev/null
    run control "$labelled"
    if [ -n "${LAYER_BEFORE:-}" ]; then
      VK_ADD_LAYER_PATH="$WORK/manifest-before" VK_INSTANCE_LAYERS=VK_LAYER_BACKSCOPE_dispatch \
        BACKSCOPE_TRACE_DIR="$WORK/trace-before" run before "$labelled" 2>/dev/null
    fi
  done
done >"$WORK/rows.jsonl"
# The traces must hold every dispatch: RUNS processes x 2 cases x ROUNDS rounds x DISPATCHES.
python3 - "$WORK/rows.jsonl" "$WORK/trace" "$RUNS" "$ROUNDS" "$DISPATCHES" <<'PY'
import glob, json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
runs, rounds, dispatches = map(int, sys.argv[3:6])
counted = 0
for path in glob.glob(sys.argv[2] + "/trace-*.jsonl"):
    for line in open(path):
        r = json.loads(line)
        counted += sum(n for _, n in r.get("counts", [])) if "window" in r else 0
assert counted == 2 * runs * rounds * dispatches, f"traces count {counted}, expected {2 * runs * rounds * dispatches}"
for labelled, case in ((0, "plain (bind, dispatch)"), (1, "labelled as ggml-vulkan with GGML_VK_DEBUG_MARKERS")):
    print(f"{case}:")
    med = {}
    arms = [a for a in ("baseline", "layer", "paused", "control", "before") if any(x["arm"] == a for x in rows)]
    for arm in arms:
        r = [x for x in rows if x["arm"] == arm and x["round"] > 0 and x["labelled"] == labelled]
        med[arm] = {k: statistics.median(x[k] for x in r) for k in ("record_ns", "submit_ns")}
        med[arm]["total_ns"] = med[arm]["record_ns"] + med[arm]["submit_ns"]
        m = med[arm]
        print(f"  {arm:9} record {m['record_ns']:7.2f} ns/dispatch   submit {m['submit_ns']:6.2f} ns/dispatch   "
              f"sum {m['total_ns']:7.2f} ns/dispatch   (medians of {len(r)} rounds)")
    pairs = [("layer", "baseline"), ("paused", "baseline"), ("layer", "paused"), ("control", "baseline")]
    if "before" in arms:
        pairs += [("before", "paused"), ("layer", "before")]
    for arm, base in pairs:
        d = {k: med[arm][k] - med[base][k] for k in med[arm]}
        print(f"  {arm} - {base}: record {d['record_ns']:+6.2f}  submit {d['submit_ns']:+6.2f}  "
              f"sum {d['total_ns']:+6.2f} ns/dispatch  ({med[arm]['total_ns'] / med[base]['total_ns']:.3f}x)")
print(f"traces counted all {counted} dispatches")
PY
