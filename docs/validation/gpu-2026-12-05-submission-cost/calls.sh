#!/usr/bin/env bash
# Session-17 device calls: the Vulkan layer's in-process decode cost on the H200 for two layer builds alternated in one
# machine start: `main` (the layer before this change) and `new` (repeats folded later, the crash ring by reference,
# recording hooks that only forward when the layer does not observe). Each arm is one in-process A/B
# (bench/gpu/vk_overhead_ab.sh: tg128, rounds alternate the layer observing and paused in ABBA groups; black box on,
# ggml's labels off: what `trace --env` leaves a service with). An arm's name names the layer file
# .carry/bb/libbackscope_vklayer-ARM.so (the A/B's switch finds the layer by that prefix), optionally followed by _N to
# run it again.
# Run from the repository root on the GPU machine, .carry/ as bench/gpu/carry_setup.sh describes plus .carry/bb/*.so
# (stripped release builds of each layer), .carry/bb/libbackscope_observer.so and .carry/src/llama.cpp (llama.h and ggml's headers):
#   OUT=DIR ARMS="new main new_2 main_2" bash docs/validation/gpu-2026-12-05-submission-cost/calls.sh
set -uo pipefail
T0=$(date +%s)
# shellcheck source=bench/gpu/carry_setup.sh
. bench/gpu/carry_setup.sh
export BACKSCOPE_OBSERVER_SO=$C/bb/libbackscope_observer.so
echo "setup at $(( $(date +%s) - T0 )) s; model $MODEL"
for arm in ${ARMS:-new main new_2 main_2}; do
  layer=$C/bb/libbackscope_vklayer-${arm%%_*}.so
  mkdir -p "$OUT/$arm"
  rm -f /var/tmp/bsvkab/*.log
  MARKERS=0 MODEL="$MODEL" TESTS="${TESTS:-tg}" AB_GROUPS="${AB_GROUPS:-40}" CONTROL_GROUPS="${CONTROL_GROUPS:-2}" \
    NVIDIA_DEBS="$C/debs" WORK=/var/tmp/bsvkab timeout "${AB_S:-150}" bash bench/gpu/vk_overhead_ab.sh "$W/backscope" \
    "$layer" "$BIN" "$C/src/llama.cpp" "$OUT/$arm" >"$OUT/$arm/log.txt" 2>&1
  echo "$arm rc=$? at $(( $(date +%s) - T0 )) s"
  cp /var/tmp/bsvkab/*.log "$OUT/$arm/" 2>/dev/null
  grep -E '^summary|trace:' "$OUT/$arm/summary.txt" | sed "s/^/$arm: /"
done
