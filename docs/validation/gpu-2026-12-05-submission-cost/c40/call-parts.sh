#!/usr/bin/env bash
# Session 40's next call, from the repository root on the GPU machine: session 35's process-level shape (c35/call-pl.sh:
# separate processes interleaved round by round, 24 repetitions of tg16 each, read from each process's fastest) with a
# fourth arm, `paused` (`trace --env` with BACKSCOPE_VK_PAUSED=1: the layer loaded and forwarding every call, the
# observer preloaded, the writer and hang watcher running, nothing followed or counted). The pooled rounds of c35/
# put what a user pays at 0.46% [0.34, 0.60] of decode; the layer's share in one process (observing against paused)
# was 0.24-0.26%. This call asks how much of the rest is the forwarding a paused layer still does, which the in-process
# A/B takes as its baseline and so never counts. The reading is fixed in the validation README ("Prepared for the next
# device calls (session 40)").
# Usage: [END_S=470] [PIN=3] bash call-parts.sh NAME   (writes $OUT/NAME/ and $OUT/NAME.tgz)
# ARMS="…" runs other arms in the same shape (session 41's follow-up, c41/reading.py: "plain preload bare paused
# plain2"). ASLR=1 leaves address randomisation on, as users run (session 41: with it off, loading a library a process
# never calls moved a CPU decode by -0.18%, a bias of where things land; bench/preload_cost.sh).
set -uo pipefail
o=$OUT/$1; mkdir -p "$o"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$o/gpu-first.txt"
sha256sum .carry/bb/*.so | tee "$o/carry.sha256"
NOASLR=$([ -n "${ASLR:-}" ] || echo 1) CLOCKS=1 ARMS=${ARMS:-plain paused env plain2} THREADS=1 TESTS="-p 0 -n 16" \
  REPS=24 PIN=${PIN:-3} ROUNDS=1000 END_S=${END_S:-470} bash bench/gpu/blackbox_cost.sh "$o" > "$o/log.txt" 2>&1
tail -3 "$o/log.txt"
tail -30 "$o/summary.txt"
bash bench/gpu/return_packed.sh "$1" summary.txt
