#!/usr/bin/env bash
# How steady the GPU machine's host CPU is: the same fixed CPU work (a pure-Python loop of 1.5 million additions, no
# memory beyond a few objects, no I/O) timed RUNS times on one core, a fresh process each time, 0.3 s apart. A quiet
# core takes about the same time every run; a core shared with other guests' work takes up to three times as long,
# in runs of a few seconds, which the hypervisor's steal counter does not show (docs/validation/
# gpu-2026-12-05-submission-cost, session 32: 0.095 to 0.30 s on an H100 host whose decode processes spread 8%).
# A decode of a 1.1B model is bound by that core (ggml records and submits each token there), so a cost measurement
# of 0.5% is only worth the device time on a host whose runs spread little: run this first, and read its line.
# Usage: bench/gpu/host_speed.sh CPU RUNS [RAW_FILE]   (prints one summary line; RAW_FILE gets each run's seconds)
set -euo pipefail
cpu=$1 runs=$2 raw=${3:-/dev/null}
for _ in $(seq "$runs"); do
  taskset -c "$cpu" python3 -c 'import time
t = time.perf_counter()
s = 0
for i in range(1500000):
    s += i
print("%.4f" % (time.perf_counter() - t))'
  sleep 0.3
done | tee "$raw" | python3 -c '
import statistics as st, sys
v = [float(x) for x in sys.stdin]
s = sorted(v)
q = lambda p: s[min(len(s) - 1, int(p * len(s)))]
lag = st.correlation(v[:-1], v[1:]) if len(v) > 2 and st.pstdev(v) > 0 else float("nan")
print("cpu %s: %d runs of a fixed loop: min %.3f s, p10 %.3f, median %.3f, p90 %.3f, max %.3f; p90/p10 %.2f; "
      "lag-1 correlation %.2f" % (sys.argv[1], len(v), s[0], q(0.1), q(0.5), q(0.9), s[-1], q(0.9) / q(0.1), lag))
' "$cpu"
