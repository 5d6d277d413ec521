#!/usr/bin/env bash
# Session-17 device calls (prepared; the GPU machine was not lent in sessions 17 and 18): the Vulkan layer's in-process decode
# cost on the H200 for layer builds alternated in one machine start. Each arm is one in-process A/B
# (bench/gpu/vk_overhead_ab.sh: tg128, rounds alternate the layer observing and paused in ABBA groups; black box on,
# ggml's labels off: what `trace --env` leaves a service with). An arm's name before any `_N` suffix (to run it again)
# picks the layer .carry/bb/libbackscope_vklayer-NAME.so (the A/B's switch finds the layer by that prefix) and, for
# the experiment build, its switch:
#   main     the layer of 53921cf (before session 17)
#   new      main at the end of session 17 (repeats folded later, the crash ring by reference, recordings kept in the
#            trail until their entries are needed, forwarding only when not observing); from session 19 on, session
#            19's layer (the pending table probing linearly, the one-pass submission)
#   head     main at 12c408d (the end of session 18)
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
#   subtime  session 19: main at 12c408d plus experiment-switches-sub.patch (hottime's switches and a submission's
#            parts timed apart: counting, by repeat and by walk; the ring's lookup; the crash ring; the black box,
#            its fence and its buffers), BACKSCOPE_VK_EXP_TIME=1
#   newtime  session 19's layer (`new`, d6b02f0) plus experiment-switches-new.patch (hottime's switches, the
#            submission timed as a whole; call c4's build had the one-pass submission without the probing table),
#            BACKSCOPE_VK_EXP_TIME=1
#   newtouch, newprefetch  newtime's build (after call c5, with the switches below), BACKSCOPE_VK_EXP_TIME=1 and
#            BACKSCOPE_VK_EXP_TOUCH_KEY=1 or BACKSCOPE_VK_EXP_PREFETCH_KEY=1: observed binds and dispatches first read
#            the command buffer's dispatch key (the driver object's first word, as the paused path's lookup does), or
#            only prefetch its line: whether the driver's bind runs slower while observed for want of that line
#   newnomark  newtime's build, BACKSCOPE_VK_EXP_TIME=1 and BACKSCOPE_VK_MARKERS=none (session 20): no buffer
#            marker at a command buffer's end (the black box follows submissions instead): whether the driver's bind
#            runs slower while observed because the buffer before it ended with a marker write
#   tip      main at 1678b1e (session 19's end: `new` and a review that changed no behaviour)
#   pf       tip plus a prefetch of the driver's command buffer object at the observed bind's and dispatch's entry
#            (session 20)
#   ctime, cnoslot, cnobind, cchain  session 20: tip plus experiment-switches-chain.patch (newtime's switches and three
#            more), BACKSCOPE_VK_EXP_TIME=1 and none, BACKSCOPE_VK_EXP_NOSLOT=1 (the observed bind looks up no pipeline
#            slot), BACKSCOPE_VK_EXP_NOBIND=1 (the observed bind forwards as the paused one does), or
#            BACKSCOPE_VK_EXP_CHAIN=1 (the observed bind first prefetches the buffer's and the pipeline's map entries):
#            which of the bind hook's loads make observed binds some 30 ns slower than paused ones
#   clate    the same build with BACKSCOPE_VK_EXP_LATESLOT=1 (added after call c9): the observed bind keeps the pipeline
#            handle and the next dispatch looks its slot up, where the buffer's state and device are already loaded
#   handle   main at bccc172 (session 20): binds keep the pipeline handle and look nothing up
#   htime    handle plus experiment-switches-new.patch (it applies to bccc172 too), BACKSCOPE_VK_EXP_TIME=1: compare
#            with ctime (1678b1e with the same switches)
#   recent   session 21: handle (42dace2) with a direct-mapped cache of the command buffers' states in front of
#            the map (`commands::RECENT`): a bind or a dispatch finds its buffer's state in one load and a compare
#   tail     session 21's last layer: recent, and bind and dispatch hooks whose every path ends in one call in tail
#            position (no saved registers)
#   short    session 22's layer (65f9099): the hooks' four settings in one word, the driver's arguments kept in their
#            registers, a paused path as short as forwarding
#   s23      session 23's layer: no hash per dispatch (a submission compares the trail with the recording before), one
#            compare for a full trail and a buffer that needs entries, the common paths one straight run of code
#   rtime    recent plus experiment-switches-new.patch (applied with `git apply --3way`), BACKSCOPE_VK_EXP_TIME=1
#   whytime  subtime's build plus, for each walked recording, why the kept counts did not hold (counts per reason),
#            and for the 300th to 329th walk the first dispatches where the recording differs from the buffer's one
#            before (`exp: why=` lines; from the 300th, BACKSCOPE_VK_EXP_WHY_FROM), BACKSCOPE_VK_EXP_TIME=1
# Run from the repository root on the GPU machine, .carry/ as bench/gpu/carry_setup.sh describes plus the layers in
# .carry/bb/ (stripped release builds), .carry/bb/libbackscope_observer.so and .carry/src/llama.cpp (llama.h and
# ggml's headers):
#   OUT=DIR ARMS="main new hot main_2 new_2 hot_2 nofast" bash docs/validation/gpu-2026-12-05-submission-cost/calls.sh
#   OUT=DIR ARMS="time touch new exp touch_2 new_2" bash docs/validation/gpu-2026-12-05-submission-cost/calls.sh
#   (session 19: OUT=DIR ARMS="newtime whytime head new head_2 new_2" …, then ARMS="new head new_2 head_2")
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
    subtime) e=(BACKSCOPE_VK_EXP_TIME=1); name=subexp ;;
    newtime) e=(BACKSCOPE_VK_EXP_TIME=1); name=newexp ;;
    whytime) e=(BACKSCOPE_VK_EXP_TIME=1); name=whyexp ;;
    newtouch) e=(BACKSCOPE_VK_EXP_TIME=1 BACKSCOPE_VK_EXP_TOUCH_KEY=1); name=newexp ;;
    newprefetch) e=(BACKSCOPE_VK_EXP_TIME=1 BACKSCOPE_VK_EXP_PREFETCH_KEY=1); name=newexp ;;
    newnomark) e=(BACKSCOPE_VK_EXP_TIME=1 BACKSCOPE_VK_MARKERS=none); name=newexp ;;
    ctime) e=(BACKSCOPE_VK_EXP_TIME=1); name=chainexp ;;
    cnoslot) e=(BACKSCOPE_VK_EXP_TIME=1 BACKSCOPE_VK_EXP_NOSLOT=1); name=chainexp ;;
    cnobind) e=(BACKSCOPE_VK_EXP_TIME=1 BACKSCOPE_VK_EXP_NOBIND=1); name=chainexp ;;
    cchain) e=(BACKSCOPE_VK_EXP_TIME=1 BACKSCOPE_VK_EXP_CHAIN=1); name=chainexp ;;
    clate) e=(BACKSCOPE_VK_EXP_TIME=1 BACKSCOPE_VK_EXP_LATESLOT=1); name=chainexp ;;
    htime) e=(BACKSCOPE_VK_EXP_TIME=1); name=handleexp ;;
    rtime) e=(BACKSCOPE_VK_EXP_TIME=1); name=recentexp ;;
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
