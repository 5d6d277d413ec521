#!/usr/bin/env bash
# Session-10 device call 2: (a) the TinyLlama harness of call 1 (-t 1, tg128 -r 10) with every process on one core
# (PIN=3: call 1's processes held steady levels that differed between processes, as if set by where the submitting
# thread ran); (b) a Qwen2-7B-shaped Q4_K_M (decode bound by the GPU, as for the models users run), pp512 and tg128.
# Both: plain, env (`trace --env`), plain2 interleaved. Run from the repository root with .carry/ as
# bench/gpu/carry_setup.sh describes.
set -uo pipefail
cd "$(dirname "$0")/../../.."
T0=$SECONDS
ARMS="plain env plain2" ROUNDS=200 THREADS=1 TESTS="-p 0 -n 128" REPS=10 PIN=3 END_S=${A_END_S:-250} \
  bash bench/gpu/blackbox_cost.sh $OUT/tiny-pinned >$OUT/tiny-pinned.log 2>&1
echo "tiny-pinned done at $((SECONDS - T0)) s"; cat $OUT/tiny-pinned/summary.txt
PRESET=qwen2-7b ARMS="plain env plain2" ROUNDS=200 THREADS=1 TESTS="-p 512 -n 128" REPS=5 \
  END_S=$((${END_S:-545} - (SECONDS - T0))) bash bench/gpu/blackbox_cost.sh $OUT/qwen7b >$OUT/qwen7b.log 2>&1
echo "qwen7b done at $((SECONDS - T0)) s"; cat $OUT/qwen7b/summary.txt
rm -rf /var/tmp/bscost/t-*
