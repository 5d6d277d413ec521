#!/usr/bin/env bash
# Session-10 device call: which llama-bench harness has the least spread between separate processes, then what a user
# pays for `trace --env` (plain, env, plain2 interleaved) with it. Run from the repository root with .carry/ as
# bench/gpu/carry_setup.sh describes; bb/ holds main's release layer and observer.
# Probe: the A/A pair (plain, plain2) under three harnesses, 5 rounds each:
#   t16  llama-bench's default threads, tg128 -r 10
#   t1   -t 1 (no CPU thread pool waking for each token's embedding lookup), tg128 -r 10
#   t1l  -t 1, tg512 -r 4 (longer repetitions)
# The harness whose plain2/plain ratios spread least then runs plain, env, plain2 until END_S.
set -uo pipefail
cd "$(dirname "$0")/../../.."
T0=$SECONDS
. bench/gpu/carry_setup.sh
echo "setup done at $((SECONDS - T0)) s"
best=; best_sd=1000
for h in t16 t1 t1l; do
  case $h in
    t16) th=; tests="-p 0 -n 128"; reps=10 ;;
    t1) th=1; tests="-p 0 -n 128"; reps=10 ;;
    t1l) th=1; tests="-p 0 -n 512"; reps=4 ;;
  esac
  ARMS="plain plain2" ROUNDS=${PROBE_ROUNDS:-5} THREADS=$th TESTS="$tests" REPS=$reps \
    bash bench/gpu/blackbox_cost.sh $OUT/probe-$h >$OUT/probe-$h.log 2>&1
  sd=$(sed -n 's/.*plain2 *spread:.*ratios to plain \([0-9.]*\)%.*/\1/p' $OUT/probe-$h/summary.txt)
  echo "probe $h at $((SECONDS - T0)) s: $(grep spread $OUT/probe-$h/summary.txt | tr '\n' ' ')"
  if [ -n "$sd" ] && awk "BEGIN{exit !($sd < $best_sd)}"; then best=$h; best_sd=$sd; fi
done
echo "chosen: $best (A/A ratio SD $best_sd%)"
case $best in
  t16) th=; tests="-p 0 -n 128"; reps=10 ;;
  t1) th=1; tests="-p 0 -n 128"; reps=10 ;;
  *) th=1; tests="-p 0 -n 512"; reps=4 ;;
esac
ARMS="plain env plain2" ROUNDS=200 THREADS=$th TESTS="$tests" REPS=$reps END_S=$((${END_S:-540} - (SECONDS - T0))) \
  bash bench/gpu/blackbox_cost.sh $OUT/cost >$OUT/cost.log 2>&1
echo "cost done at $((SECONDS - T0)) s"; cat $OUT/cost/summary.txt
rm -rf /var/tmp/bscost/t-* 
