#!/usr/bin/env bash
# Session 33's device call, from the repository root on the GPU machine: the card's name and the pinned core's speed
# (bench/gpu/host_speed.sh) first; the decode rounds of "Prepared for the next device calls (session 32)" only on an
# H200 (ANYCARD=1: any card) whose fixed loop's p90/p10 is at most MAXR (1.3). Usage: [END_S=420] bash call.sh NAME
# (writes $OUT/NAME/).
set -uo pipefail
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "GPU: $name"; mkdir -p $OUT/$1
echo "$name" > $OUT/$1/gpu-first.txt
bash bench/gpu/host_speed.sh 3 40 $OUT/$1/precheck-raw.txt | tee $OUT/$1/precheck.txt
case "$name" in *H200*) ;; *) [ -n "${ANYCARD:-}" ] || { echo "not the goal's card: no rounds"; exit 0; } ;; esac
r=$(sed -n 's/.*p90\/p10 \([0-9.]*\);.*/\1/p' $OUT/$1/precheck.txt)
echo "ratio $r"
if python3 -c "import sys; sys.exit(0 if float('$r') <= ${MAXR:-1.3} else 1)"; then
  NOASLR=1 CLOCKS=1 ARMS="plain env nomark" THREADS=1 TESTS="-p 0 -n 128" REPS=3 PIN=3 ROUNDS=1000 END_S=${END_S:-470} \
    bash bench/gpu/blackbox_cost.sh $OUT/$1 > $OUT/$1/log.txt 2>&1
  tail -5 $OUT/$1/log.txt
  python3 bench/gpu/blackbox_ab.py $OUT/$1 | tail -40
else
  echo "core unsteady: no rounds"
fi
