#!/usr/bin/env bash
# Benchmark: the Vulkan layer's instructions per token of a real ggml-vulkan decode, on the thread that records and
# submits (valgrind's callgrind, so the count does not move with the load of a shared machine). Where
# bench/vklayer_instructions.sh times a loop of binds, dispatches and submissions written for the purpose, this runs
# llama-bench itself (tg, one CPU thread, all layers on lavapipe) under everything `backscope trace --env` turns on,
# so every call ggml makes per token is in it: its pool reset after each graph, its fence waits, its command buffer
# begins and ends. Two runs of TOKENS_A and TOKENS_B tokens; their difference over TOKENS_B - TOKENS_A is one token's
# cost without the start (device and pipeline creation, shader hashing) and without the warm-up.
#
# Counted: instructions in the layer's object (and the libc calls it makes) on the recording thread only
# (`--separate-threads=yes`): the writer's and the hang watcher's threads wake by the clock, so under valgrind, which
# runs the process about a hundred times slower, they would wake a hundred times more per token than in a real run.
# `vkGetFenceStatus` is printed apart: ggml polls it while the GPU works, and on lavapipe the GPU's work is the CPU's,
# so the number of polls per token says how slow lavapipe is, not what the layer costs.
#
# Usage: bench/vklayer_ggml_instructions.sh LAYER_SO [LAYER_SO …] (e.g. main's build first, then a change's)
#   [TOKENS_A=4] [TOKENS_B=12]; a few minutes per layer build. Needs the optimised Vulkan llama.cpp build
#   (scripts/llama-build.sh vulkan-release, ~20 min on 2 cores the first time), `backscope` on PATH or in
#   target/release, lavapipe (mesa-vulkan-drivers) and valgrind. KEEP=DIR keeps the callgrind files.
set -euo pipefail
cd "$(dirname "$0")/.."
TOKENS_A="${TOKENS_A:-4}"
TOKENS_B="${TOKENS_B:-12}"
BIN=$(bash scripts/llama-build.sh vulkan-release)
BACKSCOPE=$(command -v backscope || echo target/release/backscope)
# The CUDA/HIP observer `trace --env` preloads: OBSERVER, else beside the first layer, else target/release's.
OBSERVER="${OBSERVER:-$(dirname "$1")/libbackscope_observer.so}"
[ -f "$OBSERVER" ] || OBSERVER=target/release/libbackscope_observer.so
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
[ -n "${KEEP:-}" ] && trap 'mkdir -p "$KEEP" && cp "$WORK"/cg.* "$KEEP"/; rm -rf "$WORK"' EXIT
PATH="$BIN:$PATH" "$BACKSCOPE" synth --preset tiny --type q4_k_m -o "$WORK/tiny.gguf" >/dev/null
n=0
for so in "$@"; do
  n=$((n + 1))
  mkdir -p "$WORK/$n/lib"
  cp "$so" "$WORK/$n/lib/libbackscope_vklayer.so"
  for tokens in "$TOKENS_A" "$TOKENS_B"; do
    mkdir -p "$WORK/$n/trace-$tokens"
    mapfile -t e < <("$BACKSCOPE" trace --env --dir "$WORK/$n/trace-$tokens" --observer "$OBSERVER" \
      --vklayer "$WORK/$n/lib/libbackscope_vklayer.so" | sed -n 's/^export //p')
    # lavapipe is a CPU device, which ggml-vulkan skips unless it is named. The build's libraries are found by
    # LD_LIBRARY_PATH (its run path names the build tree).
    env "${e[@]}" GGML_VK_VISIBLE_DEVICES=0 VK_ICD_FILENAMES=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json \
      LD_LIBRARY_PATH="$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
      valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$WORK/cg.$n.$tokens" \
      "$BIN/llama-bench" -m "$WORK/tiny.gguf" -ngl 99 -p 0 -n "$tokens" -r 1 -t 1 -o jsonl \
      >"$WORK/$n/out-$tokens.jsonl" 2>"$WORK/$n/err-$tokens"
  done
done
python3 - "$WORK" "$TOKENS_A" "$TOKENS_B" "$@" <<'PY'
import collections, glob, re, sys
work, a, b, sos = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
LAYER, FENCE = "libbackscope_vklayer", "backscope_vklayer::api::calls::get_fence_status"

def costs(path):
    """Self Ir per function of the layer's object, plus the libc calls it makes (a call's inclusive cost); and how
    many times each of the layer's functions was called, from anywhere (its hooks from ggml, through the loader)."""
    names = {"ob": {}, "fn": {}}
    ob = fn = ""
    cob, cfn, call, out, called = None, "", False, collections.Counter(), collections.Counter()
    for line in open(path):
        m = re.match(r"(c?)(ob|fn|fl|fi|fe)=\((\d+)\)(?: (.*))?$", line.rstrip("\n"))
        if m:
            kind = m.group(2)
            if kind in ("ob", "fn"):
                if m.group(4):
                    names[kind][m.group(3)] = m.group(4)
                name = names[kind].get(m.group(3), "")
                if m.group(1) == "":
                    ob, fn = (name, fn) if kind == "ob" else (ob, name)
                elif kind == "ob":
                    cob = name
                else:
                    cfn = name
            continue
        if line.startswith("calls="):
            call = True
            if cfn.startswith("backscope_vklayer::"):
                called[cfn] += int(line[6:].split()[0])
            continue
        if line[:1].isdigit() or line[:1] in "+-*":
            parts = line.split()
            cost = int(parts[-1]) if len(parts) > 1 else 0
            if call:
                call = False
                if LAYER in ob and cob is not None and "libc.so" in cob:
                    out["libc (" + fn + ")"] += cost
                cob = None
            elif LAYER in ob:
                out[fn] += cost
    return out, called

def recording_thread(prefix):
    """The per-thread file of the thread that called the dispatch hook most."""
    best, best_n = None, -1
    for path in glob.glob(prefix + "-*"):
        c, called = costs(path)
        n = c.get("backscope_vklayer::api::recording::cmd_dispatch", 0)
        if n > best_n:
            best, best_n = (c, called), n
    return best or (collections.Counter(), collections.Counter())

per = b - a
print(f"layer instructions per decode token on ggml's recording thread (llama-bench tg, tiny Q4_K_M on lavapipe; "
      f"tg{b} - tg{a}, over {per} tokens)")
for i, so in enumerate(sos, 1):
    (ca, na), (cb, nb) = recording_thread(f"{work}/cg.{i}.{a}"), recording_thread(f"{work}/cg.{i}.{b}")
    d = {f: (cb[f] - ca[f]) / per for f in set(ca) | set(cb)}
    calls = {f: (nb[f] - na[f]) / per for f in set(na) | set(nb)}
    fence = d.pop(FENCE, 0.0)
    total = sum(d.values())
    print(f"{so}: {total:.0f} per token (vkGetFenceStatus polls apart: {fence:.0f})")
    print("  instructions  calls  per call  (a token's; per call: the function's own instructions over its calls)")
    for f, v in sorted(d.items(), key=lambda x: -x[1])[:12]:
        if v >= 1:
            n = calls.get(f, 0)
            each = f"{v / n:8.0f}" if n >= 1 else "       -"
            print(f"  {v:12.0f} {n:6.0f}  {each}  {f[:100]}")
PY
