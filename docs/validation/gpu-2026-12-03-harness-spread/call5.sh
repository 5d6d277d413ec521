#!/usr/bin/env bash
# Session-11 device call: is the black box's process-level cost on TinyLlama's decode (call 4: env −2.45%, nobb
# −0.52%) the marker extension and its end-of-buffer markers, or VK_EXT_device_fault enabled on the device? Both are
# set up when the device is created, so the in-process A/B (observing vs paused, one device) cannot see them. Layer
# built from this session's tree (BACKSCOPE_VK_MARKERS=none, BACKSCOPE_VK_FAULT=0). Pinned harness of call 2.
set -uo pipefail
cd "$(dirname "$0")/../../.."
ARMS="plain env nomark nofault" ROUNDS=200 THREADS=1 TESTS="-p 0 -n 128" REPS=10 PIN=3 END_S=${END_S:-540} \
  bash bench/gpu/blackbox_cost.sh $OUT/attr >$OUT/attr.log 2>&1
cat $OUT/attr/summary.txt; rm -f $OUT/attr/traces.txt; rm -rf /var/tmp/bscost/t-*
