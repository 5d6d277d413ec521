#!/usr/bin/env bash
# Session-7 device call: where the black box's decode cost comes from, in one process (observing vs paused):
# markers in device-local memory, one marker per N command buffers, none.
set -uo pipefail
T0=$(date +%s)
for arm in ${ARMS:-on device every0 every4 on2}; do
  e=()
  case $arm in
    device) e=(BACKSCOPE_VK_MARKER_MEMORY=device) ;;
    every0) e=(BACKSCOPE_VK_MARKER_EVERY=0) ;;
    every2) e=(BACKSCOPE_VK_MARKER_EVERY=2) ;;
    every4) e=(BACKSCOPE_VK_MARKER_EVERY=4) ;;
    every8) e=(BACKSCOPE_VK_MARKER_EVERY=8) ;;
    devevery4) e=(BACKSCOPE_VK_MARKER_MEMORY=device BACKSCOPE_VK_MARKER_EVERY=4) ;;
    off*) e=(BACKSCOPE_VK_BLACKBOX=0) ;;
    bbab*) e=(BACKSCOPE_VK_EXP_AB_BLACKBOX=1) ;;
    nosub*) e=(BACKSCOPE_VK_MARKER_EVERY=0 BACKSCOPE_VK_EXP_NOSUBMIT=1) ;;
    compute*) e=(BACKSCOPE_VK_MARKER_STAGE=compute) ;;
    devcompute*) e=(BACKSCOPE_VK_MARKER_MEMORY=device BACKSCOPE_VK_MARKER_STAGE=compute) ;;
    all*) e=(BACKSCOPE_VK_MARKER_STAGE=all) ;;
    zero*) e=(BACKSCOPE_VK_MARKER_EVERY=0) ;;
  esac
  env "${e[@]}" DO=ab TESTS=tg AB_GROUPS=${AB_GROUPS:-40} CONTROL_GROUPS=${CONTROL_GROUPS:-4} OUT=$OUT/$arm bash .carry/call2.sh 2>&1 | grep -E "summary|trace:|setup" | sed "s/^/$arm: /"
  grep -rh "backscope-exp" $OUT/$arm /var/tmp/bsvkab 2>/dev/null | sort | uniq -c | head -2 | sed "s/^/$arm: /"
  echo "$arm done at $(( $(date +%s) - T0 )) s"
done
