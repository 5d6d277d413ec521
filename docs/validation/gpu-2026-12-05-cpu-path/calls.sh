#!/usr/bin/env bash
# Session-16 device calls: where the Vulkan layer's in-process decode cost on the H200 goes, measured in place with a
# layer built with experiment-switches.patch (beside this script, not kept):
#   time*   BACKSCOPE_VK_EXP_TIME=1     time-stamp-counter cycles per hook part, observing vs paused (printed at exit)
#   spinN*  BACKSCOPE_VK_EXP_SPIN_NS=N  "observing" rounds behave as paused plus N ns of spinning per dispatch hook
#   post*   BACKSCOPE_VK_EXP_POSTSUB=1  a submission's bookkeeping after forwarding it (only marker resets before)
#   posttime* both of the above
#   on*     the default (black box on, labels off: what `trace --env` leaves a service with)
# Each arm is one in-process A/B (bench/gpu/vk_overhead_ab.sh: tg128, rounds alternate observing and paused in ABBA
# groups). Run from the repository root on the GPU machine, .carry/ as bench/gpu/carry_setup.sh describes plus
# .carry/bb/libbackscope_{vklayer,observer}.so and .carry/src/llama.cpp (llama.h and ggml's headers):
#   OUT=DIR ARMS="…" bash docs/validation/gpu-2026-12-05-cpu-path/calls.sh
set -uo pipefail
T0=$(date +%s)
# shellcheck source=bench/gpu/carry_setup.sh
. bench/gpu/carry_setup.sh
export BACKSCOPE_OBSERVER_SO=$C/bb/libbackscope_observer.so
echo "setup at $(( $(date +%s) - T0 )) s; model $MODEL"
for arm in ${ARMS:-time spin60 on spin200 on2}; do
  e=()
  case $arm in
    time*) e=(BACKSCOPE_VK_EXP_TIME=1) ;;
    posttime*) e=(BACKSCOPE_VK_EXP_POSTSUB=1 BACKSCOPE_VK_EXP_TIME=1) ;;
    post*) e=(BACKSCOPE_VK_EXP_POSTSUB=1) ;;
    spin*) n=${arm#spin}; e=(BACKSCOPE_VK_EXP_SPIN_NS=${n%%_*}) ;;
  esac
  mkdir -p "$OUT/$arm"
  rm -f /var/tmp/bsvkab/*.log
  env "${e[@]}" MARKERS=0 MODEL="$MODEL" TESTS=tg AB_GROUPS="${AB_GROUPS:-40}" CONTROL_GROUPS="${CONTROL_GROUPS:-2}" \
    NVIDIA_DEBS="$C/debs" WORK=/var/tmp/bsvkab timeout "${AB_S:-150}" bash bench/gpu/vk_overhead_ab.sh "$W/backscope" \
    "$C/bb/libbackscope_vklayer.so" "$BIN" "$C/src/llama.cpp" "$OUT/$arm" >"$OUT/$arm/log.txt" 2>&1
  echo "$arm rc=$? at $(( $(date +%s) - T0 )) s"
  cp /var/tmp/bsvkab/*.log "$OUT/$arm/" 2>/dev/null
  grep -E '^summary|trace:' "$OUT/$arm/summary.txt" | sed "s/^/$arm: /"
  grep -h '^exp:' "$OUT/$arm"/tg-*.log 2>/dev/null | sed "s/^/$arm: /"
done
