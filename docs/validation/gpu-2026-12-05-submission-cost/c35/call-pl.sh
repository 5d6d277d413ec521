#!/usr/bin/env bash
# Session 35's process-level call, from the repository root on the GPU machine: `trace --env` against plain as
# separate processes, interleaved round by round (bench/gpu/blackbox_cost.sh), in a shape meant to resolve on a host
# whose core runs in two speed states (every H100 host of sessions 32-34; session 31's H200 processes came in two
# states 8% apart). Each process times many short decodes (REPS=24 of 16 tokens, about 25 ms each on these cards)
# instead of three of 128, and the result is read from each process's *fastest* repetition: the layer's work is in
# every token of every repetition, while a slow state only ever slows one down, so the fastest of 24 short ones is the
# least disturbed in both arms alike. A second plain arm (plain2) is the A/A control: it says whether the rounds
# resolved. The reading was fixed before any of these rounds ran (validation README, "Session 35: the first ask, and
# a process-level shape for a host that changes speed").
# Usage: [END_S=300] [PIN=3] bash call-pl.sh NAME   (writes $OUT/NAME/ and $OUT/NAME.tgz)
set -uo pipefail
o=$OUT/$1; mkdir -p "$o"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$o/gpu-first.txt"
NOASLR=1 CLOCKS=1 ARMS="plain env plain2" THREADS=1 TESTS="-p 0 -n 16" REPS=24 PIN=${PIN:-3} ROUNDS=1000 \
  END_S=${END_S:-300} bash bench/gpu/blackbox_cost.sh "$o" > "$o/log.txt" 2>&1
tail -3 "$o/log.txt"
tail -30 "$o/summary.txt"   # blackbox_cost.sh wrote it (blackbox_ab.py, then the host's speed)
# The device returns at most 8 files: the folder goes into NAME.tgz, and only the summary stays beside it.
bash bench/gpu/return_packed.sh "$1" summary.txt
