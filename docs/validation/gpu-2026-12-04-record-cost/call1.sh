#!/usr/bin/env bash
# Session-12 device call 1: is the Vulkan layer's in-process decode cost (observing vs paused, black box on, ggml
# labels off: what `trace --env` leaves a service with) its recording of dispatches? Arms alternate the layer's
# default with BACKSCOPE_VK_EXP_NOREC=1, an experiment switch of this call's layer build (experiment-switches.patch
# beside this script, not kept): the dispatch and bind hooks behave as when paused, the rest observes.
# Run from the repository root on the GPU machine with .carry/ as bench/gpu/carry_setup.sh describes, plus
# .carry/bb/libbackscope_vklayer.so (the patched layer) and .carry/src/llama.cpp (llama.h and ggml's headers).
set -uo pipefail
T0=$(date +%s)
# shellcheck source=bench/gpu/carry_setup.sh
. bench/gpu/carry_setup.sh
export BACKSCOPE_OBSERVER_SO=$C/bb/libbackscope_observer.so
echo "setup at $(( $(date +%s) - T0 )) s; model $MODEL"
for arm in ${ARMS:-on norec on2 norec2 on3 norec3}; do
  e=()
  case $arm in norec*) e=(BACKSCOPE_VK_EXP_NOREC=1) ;; esac
  mkdir -p "$OUT/$arm"
  env "${e[@]}" MARKERS=0 MODEL="$MODEL" TESTS=tg AB_GROUPS="${AB_GROUPS:-50}" CONTROL_GROUPS="${CONTROL_GROUPS:-4}" \
    NVIDIA_DEBS="$C/debs" WORK=/var/tmp/bsvkab timeout "${AB_S:-150}" bash bench/gpu/vk_overhead_ab.sh "$W/backscope" \
    "$C/bb/libbackscope_vklayer.so" "$BIN" "$C/src/llama.cpp" "$OUT/$arm" >"$OUT/$arm/log.txt" 2>&1
  echo "$arm rc=$? at $(( $(date +%s) - T0 )) s"
  grep -E '^summary|trace:' "$OUT/$arm/summary.txt" | sed "s/^/$arm: /"
done
