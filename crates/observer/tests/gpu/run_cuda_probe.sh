#!/bin/sh
# GPU validation of the dispatch observer's CUDA hooks (CUDA 12.4+/13, a Hopper GPU for the PDL
# attribute). Not run by CI.
#   usage: run_cuda_probe.sh /path/to/libbackscope_observer.so [workdir]
# Builds the probes with nvcc (shared cudart: with nvcc's default static cudart no exported entry
# point is called), runs each without and with the observer, requires identical output, and checks
# the trace against the probe's own expectations (check_trace.py).
set -eu
lib=$(realpath "$1")
here=$(cd "$(dirname "$0")" && pwd)
work=${2:-$(mktemp -d)}
mkdir -p "$work"
cd "$work"
nvcc -arch=sm_90 -cudart shared -o cuda_probe "$here/cuda_probe.cu" -lcuda -lcublas
nvcc -arch=sm_90 -cubin -o drv_kernel.cubin "$here/drv_kernel.cu"
nvcc -arch=sm_90 -cudart shared --default-stream per-thread -o cuda_probe_ptsz "$here/cuda_probe_ptsz.cu"
status=0
for probe in cuda_probe cuda_probe_ptsz; do
  rm -rf "traces-$probe" && mkdir "traces-$probe"
  ./$probe > "$probe.plain.txt" 2> "$probe.plain.err"
  LD_PRELOAD="$lib" BACKSCOPE_TRACE_DIR="$work/traces-$probe" ./$probe > "$probe.observed.txt" 2> "$probe.observed.err"
  grep TIMING "$probe.plain.err" "$probe.observed.err" || true
  if ! diff "$probe.plain.txt" "$probe.observed.txt"; then echo "$probe: output changed"; status=1; fi
  if grep backscope-observer "$probe.observed.err"; then status=1; fi
  python3 "$here/check_trace.py" "$probe.observed.txt" "traces-$probe" || status=1
done
echo "work dir: $work"
exit $status
