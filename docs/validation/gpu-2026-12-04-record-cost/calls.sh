#!/usr/bin/env bash
# Session-12 device calls 1-3: where the Vulkan layer's in-process decode cost (observing vs paused, black box on,
# ggml labels off: what `trace --env` leaves a service with) comes from. Each arm is one A/B with a layer built with
# experiment-switches.patch (beside this script, not kept), which turns one part of observing off per variable:
#   norec*   BACKSCOPE_VK_EXP_NOREC=1      the dispatch and bind hooks behave as when paused
#   nosub*   BACKSCOPE_VK_EXP_NOSUBWORK=1  submissions behave as when paused; the recording hooks observe
#   nobind*  BACKSCOPE_VK_EXP_NOBIND=1     the bind hook does not observe (no pipeline lookup)
#   noentry* BACKSCOPE_VK_EXP_NOENTRY=1    a dispatch appends no entry and steps no sequence hash
#   notrail* BACKSCOPE_VK_EXP_NOTRAIL=1    a dispatch writes no black-box trail
#   on*      the default
# The three calls: ARMS="on norec on2 norec2 on3 norec3" (call 1), ARMS="nosub on nosub2 on2 norec nosub3" (call 2),
# ARMS="on nobind noentry notrail on2 nobind2" (call 3); each call's layer knew the switches of its call and the ones
# before (a variable a build does not know is ignored).
# Run from the repository root on the GPU machine with .carry/ as bench/gpu/carry_setup.sh describes, plus
# .carry/bb/libbackscope_{vklayer,observer}.so (the patched layer) and .carry/src/llama.cpp (llama.h and ggml's
# headers): OUT=DIR ARMS="…" bash docs/validation/gpu-2026-12-04-record-cost/calls.sh
set -uo pipefail
T0=$(date +%s)
# shellcheck source=bench/gpu/carry_setup.sh
. bench/gpu/carry_setup.sh
export BACKSCOPE_OBSERVER_SO=$C/bb/libbackscope_observer.so
echo "setup at $(( $(date +%s) - T0 )) s; model $MODEL"
for arm in ${ARMS:-on norec on2 norec2 on3 norec3}; do
  e=()
  case $arm in
    norec*) e=(BACKSCOPE_VK_EXP_NOREC=1) ;;
    nosub*) e=(BACKSCOPE_VK_EXP_NOSUBWORK=1) ;;
    nobind*) e=(BACKSCOPE_VK_EXP_NOBIND=1) ;;
    noentry*) e=(BACKSCOPE_VK_EXP_NOENTRY=1) ;;
    notrail*) e=(BACKSCOPE_VK_EXP_NOTRAIL=1) ;;
  esac
  mkdir -p "$OUT/$arm"
  env "${e[@]}" MARKERS=0 MODEL="$MODEL" TESTS=tg AB_GROUPS="${AB_GROUPS:-50}" CONTROL_GROUPS="${CONTROL_GROUPS:-4}" \
    NVIDIA_DEBS="$C/debs" WORK=/var/tmp/bsvkab timeout "${AB_S:-150}" bash bench/gpu/vk_overhead_ab.sh "$W/backscope" \
    "$C/bb/libbackscope_vklayer.so" "$BIN" "$C/src/llama.cpp" "$OUT/$arm" >"$OUT/$arm/log.txt" 2>&1
  echo "$arm rc=$? at $(( $(date +%s) - T0 )) s"
  grep -E '^summary|trace:' "$OUT/$arm/summary.txt" | sed "s/^/$arm: /"
done
