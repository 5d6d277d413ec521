#!/usr/bin/env bash
# How steady the GPU machine's host CPU is: the same fixed CPU work (a pure-Python loop of 1.5 million additions, no
# memory beyond a few objects, no I/O) timed RUNS times on each listed core, a fresh process each time, 0.3 s apart,
# the cores taken in turn so that each sees the same stretch of time. A quiet core takes about the same time every
# run; a core shared with other guests' work takes up to three times as long, in runs of a few seconds, which the
# hypervisor's steal counter does not show (docs/validation/gpu-2026-12-05-submission-cost, session 32: 0.095 to
# 0.30 s on an H100 host whose decode processes spread 8%). A decode of a 1.1B model is bound by one core (ggml
# records and submits each token there), so a cost measurement of 0.5% is only worth the device time on a core whose
# runs spread little: run this first, and read its lines.
# Usage: bench/gpu/host_speed.sh CPUS RUNS [RAW_FILE]
#   CPUS: one core or a comma list (3 or 1,3,5). Prints one summary line per core, in the list's order; RAW_FILE gets
#   "CPU SECONDS" per run, in run order.
set -euo pipefail
cpus=$1 runs=$2 raw=${3:-/dev/null}
for _ in $(seq "$runs"); do
  for cpu in ${cpus//,/ }; do
    taskset -c "$cpu" python3 -c 'import sys, time
t = time.perf_counter()
s = 0
for i in range(1500000):
    s += i
print("%s %.4f" % (sys.argv[1], time.perf_counter() - t))' "$cpu"
    sleep 0.3
  done
done | tee "$raw" | python3 -c '
import statistics as st, sys
runs = {}
for line in sys.stdin:
    cpu, secs = line.split()
    runs.setdefault(cpu, []).append(float(secs))
for cpu in sys.argv[1].split(","):
    v = runs.get(cpu, [])
    if not v:
        print("cpu %s: no runs" % cpu)
        continue
    s = sorted(v)
    q = lambda p: s[min(len(s) - 1, int(p * len(s)))]
    lag = st.correlation(v[:-1], v[1:]) if len(v) > 2 and st.pstdev(v) > 0 else float("nan")
    print("cpu %s: %d runs of a fixed loop: min %.3f s, p10 %.3f, median %.3f, p90 %.3f, max %.3f; p90/p10 %.2f; "
          "lag-1 correlation %.2f" % (cpu, len(v), s[0], q(0.1), q(0.5), q(0.9), s[-1], q(0.9) / q(0.1), lag))
' "$cpus"
