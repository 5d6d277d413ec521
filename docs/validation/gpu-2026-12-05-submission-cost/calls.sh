#!/usr/bin/env bash
# Session-17 device calls (prepared; the GPU machine was not lent in sessions 17 and 18): the Vulkan layer's in-process decode
# cost on the H200 for layer builds alternated in one machine start. Each arm is one in-process A/B
# (bench/gpu/vk_overhead_ab.sh: tg128, rounds alternate the layer observing and paused in ABBA groups; black box on,
# ggml's labels off: what `trace --env` leaves a service with). An arm's name before any `_N` suffix (to run it again)
# picks the layer .carry/bb/libbackscope_vklayer-NAME.so (the A/B's switch finds the layer by that prefix) and, for
# the experiment build, its switch:
#   main     the layer of 53921cf (before session 17)
#   new      main at the end of session 17 (repeats folded later, the crash ring by reference, recordings kept in the
#            trail until their entries are needed, forwarding only when not observing)
#   nofast   new without the forwarding-only path, so that its paused arm is main's
#   hot      session 18 (5081a26): new with the bind and dispatch hooks' common paths inline and a few cache lines long,
#            barriers not hooked, and the marker memory chosen for a hang (host-cached system memory first where
#            offered; main and new took the first host-visible coherent type) (BENCHMARKS.md, "Fewer lines per hook";
#            the barriers are not hooked in either arm, so only the process-level call shows what that gives)
#   time     new plus experiment-switches.patch (beside this script, not kept), BACKSCOPE_VK_EXP_TIME=1: time-stamp-
#            counter cycles per hook part, observed and paused, printed at exit (as session 16's call)
#   touch    the same build, BACKSCOPE_VK_EXP_TOUCH_KEY=1: observed recording hooks also read the command buffer's
#            dispatch key as the paused path does (is the driver's slower bind and dispatch the paused path's warm line?)
#   exp      the same build, no switch (equal to new)
#   hottime  hot plus experiment-switches-hot.patch (session 18's port of the timing switches to its hooks: each hook
#            timed on the path it takes, the paused one forwarding only), BACKSCOPE_VK_EXP_TIME=1
# Run from the repository root on the GPU machine, .carry/ as bench/gpu/carry_setup.sh describes plus the layers in
# .carry/bb/ (stripped release builds), .carry/bb/libbackscope_observer.so and .carry/src/llama.cpp (llama.h and
# ggml's headers):
#   OUT=DIR ARMS="main new hot main_2 new_2 hot_2 nofast" bash docs/validation/gpu-2026-12-05-submission-cost/calls.sh
#   OUT=DIR ARMS="time touch new exp touch_2 new_2" bash docs/validation/gpu-2026-12-05-submission-cost/calls.sh
set -uo pipefail
T0=$(date +%s)
# shellcheck source=bench/gpu/carry_setup.sh
. bench/gpu/carry_setup.sh
export BACKSCOPE_OBSERVER_SO=$C/bb/libbackscope_observer.so
echo "setup at $(( $(date +%s) - T0 )) s; model $MODEL"
AB_WORK=$W/ab
for arm in ${ARMS:-main new hot main_2 new_2 hot_2 nofast}; do
  name=${arm%%_*}
  e=()
  case $name in
    time) e=(BACKSCOPE_VK_EXP_TIME=1); name=exp ;;
    touch) e=(BACKSCOPE_VK_EXP_TOUCH_KEY=1); name=exp ;;
    hottime) e=(BACKSCOPE_VK_EXP_TIME=1); name=hotexp ;;
  esac
  mkdir -p "$OUT/$arm"
  rm -f "$AB_WORK"/*.log
  env "${e[@]}" MARKERS=0 MODEL="$MODEL" TESTS="${TESTS:-tg}" AB_GROUPS="${AB_GROUPS:-40}" \
    CONTROL_GROUPS="${CONTROL_GROUPS:-2}" NVIDIA_DEBS="$C/debs" WORK="$AB_WORK" timeout "${AB_S:-150}" \
    bash bench/gpu/vk_overhead_ab.sh "$W/backscope" "$C/bb/libbackscope_vklayer-$name.so" "$BIN" "$C/src/llama.cpp" \
    "$OUT/$arm" >"$OUT/$arm/log.txt" 2>&1
  echo "$arm rc=$? at $(( $(date +%s) - T0 )) s"
  cp "$AB_WORK"/*.log "$OUT/$arm/" 2>/dev/null
  grep -E '^summary|trace:' "$OUT/$arm/summary.txt" | sed "s/^/$arm: /"
  grep -h '^exp:' "$OUT/$arm"/tg-*.log 2>/dev/null | sed "s/^/$arm: /"
done
