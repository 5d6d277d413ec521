#!/usr/bin/env bash
# Next device call (not run yet: session 10 had no device time left): what in the layer's observing costs TinyLlama's
# decode 2.6% at the process level, where the in-process A/B shows about 1%. Pinned harness of call 2; arms: plain,
# env, nobb (black box and pipeline statistics off: no extensions added, no marker memory, no hang watcher), noorder
# (no order records), present (layer loaded, not observing). Run twice (two calls) for ~40 rounds.
set -uo pipefail
cd "$(dirname "$0")/../../.."
ARMS="plain env nobb noorder present" ROUNDS=200 THREADS=1 TESTS="-p 0 -n 128" REPS=10 PIN=3 END_S=${END_S:-540} \
  bash bench/gpu/blackbox_cost.sh $OUT/attr >$OUT/attr.log 2>&1
cat $OUT/attr/summary.txt; rm -f $OUT/attr/traces.txt; rm -rf /var/tmp/bscost/t-*
