#!/usr/bin/env bash
# Session-12 device call 2: which part of the recording cost that call1.sh found: the recording hooks (dispatch, bind)
# or the per-dispatch work a submission does (counting, the crash ring, the black box)? BACKSCOPE_VK_EXP_NOSUBWORK=1
# (experiment-switches.patch beside this script, not kept) makes submissions behave as when paused while the
# recording hooks observe; BACKSCOPE_VK_EXP_NOREC=1 as in call 1. Same setup as call1.sh.
set -uo pipefail
T0=$(date +%s)
# shellcheck source=bench/gpu/carry_setup.sh
. bench/gpu/carry_setup.sh
export BACKSCOPE_OBSERVER_SO=$C/bb/libbackscope_observer.so
echo "setup at $(( $(date +%s) - T0 )) s; model $MODEL"
for arm in ${ARMS:-nosub on nosub2 on2 norec nosub3}; do
  e=()
  case $arm in norec*) e=(BACKSCOPE_VK_EXP_NOREC=1) ;; nosub*) e=(BACKSCOPE_VK_EXP_NOSUBWORK=1) ;; esac
  mkdir -p "$OUT/$arm"
  env "${e[@]}" MARKERS=0 MODEL="$MODEL" TESTS=tg AB_GROUPS="${AB_GROUPS:-50}" CONTROL_GROUPS="${CONTROL_GROUPS:-4}" \
    NVIDIA_DEBS="$C/debs" WORK=/var/tmp/bsvkab timeout "${AB_S:-150}" bash bench/gpu/vk_overhead_ab.sh "$W/backscope" \
    "$C/bb/libbackscope_vklayer.so" "$BIN" "$C/src/llama.cpp" "$OUT/$arm" >"$OUT/$arm/log.txt" 2>&1
  echo "$arm rc=$? at $(( $(date +%s) - T0 )) s"
  grep -E '^summary|trace:' "$OUT/$arm/summary.txt" | sed "s/^/$arm: /"
done
