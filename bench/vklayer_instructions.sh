#!/usr/bin/env bash
# Benchmark: the Vulkan layer's host cost per dispatch in instructions (valgrind's callgrind), which, unlike
# wall-clock time, does not move with the load of a shared machine. bench/vklayer/dispatch_loop.c records DISPATCHES
# dispatches per command buffer (32: about what ggml-vulkan submits per command buffer while decoding a small model)
# and submits it, ROUNDS times, plain and labelled as ggml-vulkan labels under GGML_VK_DEBUG_MARKERS; each layer build
# runs observing and paused (its switch, what bench/gpu/vk_overhead_ab.sh's plain arm is). For every recording and
# submission hook the cost is its inclusive instruction count minus what it forwards to (the loader and the driver):
# the layer's own work, lookups included. Observing minus paused is what observing costs. Two sums are printed: the
# layer's functions by name (the figure earlier BENCHMARKS sections give), and everything that runs in the layer's
# object plus the libc calls it makes (memcpy, memset, strnlen), which also counts std's generic code compiled into
# the layer (`catch_unwind`'s `do_call`, which holds the recording of a dispatch when it is not inlined).
# With CACHE=1, callgrind also simulates first-level caches of 16 lines each and the script prints the lines of code
# and of data the layer touches per dispatch (its misses there): the layer's footprint between two of the driver's
# calls.
# Usage: bench/vklayer_instructions.sh LAYER_SO [LAYER_SO …] (e.g. an older build first, then
#        target/release/libbackscope_vklayer.so); DISPATCHES=32 ROUNDS=300 by default.
# DISPATCH_LOOP_KEYS=20: the plain loop's command buffers hold 20 distinct (pipeline, workgroup count) keys, as
#        ggml-vulkan's decode buffers of a 1.1B model do (default 6; bench/vklayer/dispatch_loop.c).
set -euo pipefail
cd "$(dirname "$0")/.."
DISPATCHES="${DISPATCHES:-32}"
ROUNDS="${ROUNDS:-300}"
WORK=$(mktemp -d)
# CACHE=1: also simulate first-level caches of 1 KiB (16 lines) and count the layer's misses there, its footprint.
SIM=()
[ -n "${CACHE:-}" ] && SIM=(--cache-sim=yes --I1=1024,2,64 --D1=1024,2,64 --LL=4194304,16,64)
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
        BACKSCOPE_TRACE_DIR="$WORK/$n/trace" valgrind --tool=callgrind "${SIM[@]}" --callgrind-out-file="$WORK/cg.$n.$labelled.$arm" \
        "$WORK/dispatch_loop" "$WORK/noop.spv" "$DISPATCHES" "$ROUNDS" "$labelled" >/dev/null 2>"$WORK/cg.$n.$labelled.$arm.log"
    done
  done
done
python3 - "$WORK" "$DISPATCHES" "$ROUNDS" "$@" <<'PY'
import os, re, subprocess, sys
work, dispatches, rounds, sos = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
cache = bool(os.environ.get("CACHE"))
# Exclusive instructions of the layer's own code, inlined parts included (callgrind lists those under the file they
# come from, so only sums over every entry are independent of how entries are grouped); libc calls the layer makes
# (strnlen for labels) are not included.
own = re.compile(r"^\s*([\d,]+) \([^)]*\)\s+\S*:(\S*(backscope_vklayer|trace_format)::\S*)")
area = {"api::recording": "recording", "commands::": "recording+submit", "labels::": "recording",
        "api::calls": "submit", "locus::": "submit"}

def layer_ir(path):
    out = subprocess.run(["callgrind_annotate", "--auto=no", "--show=Ir", "--threshold=100", path],
                         capture_output=True, text=True, check=True).stdout
    return sum(int(m.group(1).replace(",", "")) for m in map(own.match, out.splitlines()) if m)

def object_costs(path):
    """Self cost of every instruction in the layer's object, plus the inclusive cost of its calls into libc: a dict
    from callgrind's event names (Ir; with the cache simulation also I1mr, D1mr, D1mw, …) to their sums."""
    names = {"ob": {}, "fn": {}}
    ob, cob, in_layer, call, events, total = "", None, False, False, [], []
    for line in open(path):
        if line.startswith("events:"):
            events = line.split()[1:]
            total = [0] * len(events)
            continue
        m = re.match(r"(c?)(ob|fn)=\((\d+)\)(?: (.*))?$", line.rstrip("\n"))
        if m:
            if m.group(4):
                names[m.group(2)][m.group(3)] = m.group(4)
            name = names[m.group(2)].get(m.group(3), "")
            if m.group(2) == "ob" and m.group(1) == "":
                ob, in_layer = name, "libbackscope_vklayer" in name
            elif m.group(2) == "ob":
                cob = name
        elif line.startswith("calls="):
            call = True
        elif line[:1].isdigit() or line[:1] in "+-*":
            costs = [int(v) for v in line.split()[1:]]
            counted = in_layer and (not call or "libc.so" in (cob if cob is not None else ob))
            if call:
                call, cob = False, None
            if counted:
                for i, v in enumerate(costs):
                    total[i] += v
    return dict(zip(events, total))

print(f"layer instructions per dispatch ({dispatches} dispatches per submission, {rounds} submissions; "
      "observing - paused)")
for n, so in enumerate(sos, 1):
    for labelled, case in ((1, "labelled as ggml-vulkan with GGML_VK_DEBUG_MARKERS"), (0, "plain")):
        files = [f"{work}/cg.{n}.{labelled}.{arm}" for arm in ("observing", "paused")]
        obs, paused = (layer_ir(f) for f in files)
        o, p = (object_costs(f) for f in files)
        whole_obs, whole_paused = o["Ir"], p["Ir"]
        per = lambda ir: ir / (dispatches * rounds)
        print(f"{so} [{case}]: layer functions: observing {per(obs):.0f}, paused {per(paused):.0f}, "
              f"observing - paused {per(obs - paused):.0f}; layer object + libc: observing - paused "
              f"{per(whole_obs - whole_paused):.0f} instructions per dispatch")
        if cache:
            # With first-level caches of 16 lines, nearly every line the layer touches in a hook is a miss there
            # (lavapipe's recording runs between two hooks): misses per dispatch count the lines of code and of data
            # a dispatch costs the layer, what the driver's own code and data then lose on a real GPU's driver.
            code = lambda c: c["I1mr"]
            data = lambda c: c["D1mr"] + c["D1mw"]
            print(f"{so} [{case}]: lines touched per dispatch (misses in a 1 KiB L1): code: observing "
                  f"{per(code(o)):.1f}, paused {per(code(p)):.1f}; data: observing {per(data(o)):.1f}, paused "
                  f"{per(data(p)):.1f}")
PY
