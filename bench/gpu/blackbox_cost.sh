#!/usr/bin/env bash
# What a user pays for `backscope trace --env` (a service left traced: the CUDA/HIP observer preloaded, the Vulkan
# layer with its black box, the crash ring and the hang watcher, no ggml labels) against a plain run, as separate
# processes interleaved round by round: llama-bench (TinyLlama-shaped Q4_K_M, `backscope synth`, all layers on the
# GPU) pp512 + tg128, -r 5 per process. Arms (ARMS):
#   plain    no observer, no layer (plain2: the same again, the A/A control);
#   env      exactly what `backscope trace --env --dir D` prints, exported;
#   nostats  env with BACKSCOPE_VK_PIPELINE_STATS=0 (pipelines created without CAPTURE_STATISTICS);
#   nobb     env with BACKSCOPE_VK_BLACKBOX=0 and BACKSCOPE_VK_PIPELINE_STATS=0;
#   present  the layer loaded but not observing (no trace directory: it only forwards calls);
#   labels   env with ggml's debug labels (GGML_VK_DEBUG_MARKERS=1, `trace --labels on`);
#   nopre    env without the CUDA/HIP observer's LD_PRELOAD (the Vulkan layer alone, observing);
#   nowin    env with BACKSCOPE_TRACE_INTERVAL_MS=0 (no writer thread waking every window: the trace is written at exit);
#   noorder  env with BACKSCOPE_VK_ORDER=0 (no dispatch-order sequences);
#   nomark   env with BACKSCOPE_VK_MARKERS=none (no buffer markers and no marker extension: progress by submissions);
#   nofault  env with BACKSCOPE_VK_FAULT=0 (VK_EXT_device_fault not enabled);
#   devmark  env with BACKSCOPE_VK_MARKER_MEMORY=device (the markers in the GPU's own memory, through the BAR);
#   min32    env with BACKSCOPE_VK_MARKER_MIN_DISPATCHES=32 (a buffer's end marked once 32 dispatches went unmarked);
#   paused   env with BACKSCOPE_VK_PAUSED=1 (the layer's hooks installed but only forwarding: what the forwarding
#            costs, apart from observing);
#   bare     paused without the extensions and flags the layer enables on the device it creates
#            (BACKSCOPE_VK_MARKERS=none: no marker extension; BACKSCOPE_VK_FAULT=0: no VK_EXT_device_fault;
#            BACKSCOPE_VK_PIPELINE_STATS=0): the layer loaded, forwarding, its writer and watcher running, so that
#            paused - bare is what enabling those on the device costs;
#   preload  no layer, only what `trace --env` preloads (the CUDA/HIP observer, which a Vulkan process never calls) and
#            its trace directory: what loading a library changes in a process that does not use it;
#   env+VAR=VALUE[+VAR=VALUE…]  env with those variables set too (settings together that no arm above has:
#            env+BACKSCOPE_VK_MARKER_MEMORY=device+BACKSCOPE_VK_MARKER_MIN_DISPATCHES=32; with
#            env+BACKSCOPE_VK_MARKER_MIN_DISPATCHES=1 every command buffer is marked, the default before 2026-12-06);
#   env@NAME env with the layer .carry/bb/libbackscope_vklayer-NAME.so instead (two layer builds against a plain run
#            in one machine start: ARMS="plain env env@short"). `trace --env` writes the layer's manifest beside the
#            library it names, so arms that run one after another each load their own build.
# Run from the repository root on the GPU machine with .carry/ holding backscope.xz, debs/ (Debian's Vulkan loader and
# GL libraries), bb/{libbackscope_vklayer.so,libbackscope_observer.so}, and either llama.tar.xz (a stripped Vulkan
# llama.cpp bin dir) plus ggml-vocab-llama-spm.gguf, or what bench/gpu/build_vulkan_llama.sh builds (LLAMA_BIN).
# bench/gpu/make_carry.sh lays all of it out here (LAYER_AT adds the layer builds of env@NAME arms).
# Usage: [ARMS="plain env nostats"] [ROUNDS=20] [TESTS="-p 512 -n 128"] [REPS=5] [PIN=2-9] [NOASLR=1] [THREADS=N]
#        [PRESET=tinyllama-1.1b] [END_S=seconds] [ORDER=fixed] [CLOCKS=1] [HOST_RUNS=20]
#        bash bench/gpu/blackbox_cost.sh OUT_DIR
#   (TESTS="-p 0 -n 128" times decode alone, for more rounds in the same time; THREADS is llama-bench's -t, the CPU
#   threads that wake for the CPU's share of every token (the embedding lookup); END_S starts no round after that
#   many seconds, so that a device call's time limit leaves the rounds done and the summary; REPS: the spread between
#   processes, not between repetitions, is what the interval is made of, so fewer repetitions buy more rounds: on
#   the H100/H200 calls of docs/validation/gpu-2026-12-05-submission-cost the process medians' spread is about 4.7%
#   with 3 repetitions and 3.9% with 10, and a decode process of 3 takes about 1.0 s against 2.2 s: REPS=3 narrows a
#   call's interval by about a quarter)
# Summary: python3 bench/gpu/blackbox_ab.py OUT_DIR (each process's median over its repetitions; paired ratios to plain
# per round, bootstrap 95% intervals; and where the spread is: between repetitions, processes and rounds).
set -euo pipefail
# Each process's wall, user and system seconds (model load and pipeline creation included) go to OUT/times.txt,
# "ROUND ARM REAL USER SYS STEAL": a process whose CPU ran slow takes more user time for the same work, a fact for
# reading the spread between processes (on session 31's H200 they came in two states 8% apart, in both arms alike).
# STEAL is the time, in clock ticks (USER_HZ), that the hypervisor ran something else while the pinned cores (all
# cores without PIN) wanted to run, over the process's life (/proc/stat's eighth field); unlike user time it does not
# grow with an arm's own work. It does not see everything that slows a core: on session 32's H100 it stayed at 0-1
# ticks while a fixed loop on the pinned core ran up to three times slower from one second to the next (other work on
# the same physical core is not steal; host.txt below measures the core itself). CLOCKS=1 also writes the GPU's SM
# and memory clocks, P-state and temperature to OUT/clocks.txt before each process and right after it ("ROUND ARM
# before|after …"; the clocks after are still the ones the work ran at: they fall back to idle over a second or so),
# one nvidia-smi call each, about a tenth of a second.
TIMEFORMAT='%R %U %S'
# shellcheck source=bench/gpu/carry_setup.sh
. "$(dirname "$0")/carry_setup.sh"
OUT=$(mkdir -p "$1" && realpath "$1")
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$OUT/gpu.txt" 2>&1 || true
# Where the GPU and the pinned core sit (a two-socket host's GPU hangs off one socket; a pinned core on the other one
# reaches the driver's host memory and the GPU across the socket link), and what clocks the core: facts for reading
# the spread between processes, suspected to come from the machine rather than from an arm.
# The first pinned core (core 0 without PIN): where_placed describes it and host_speed times it.
first_cpu=${PIN:-0}
first_cpu=${first_cpu%%[-,]*}
where_placed() {
  local id node cpu=$first_cpu
  id=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader 2>/dev/null | head -1 | tr 'A-F' 'a-f') || true
  if [ -n "$id" ]; then
    node=$(cat "/sys/bus/pci/devices/${id: -12}/numa_node" 2>/dev/null || echo unknown)
    echo "gpu $id numa_node $node"
  fi
  echo "pinned cpu $cpu numa_node $(lscpu -p=CPU,NODE 2>/dev/null | grep -m1 "^$cpu," | cut -d, -f2)" \
    "governor $(cat "/sys/devices/system/cpu/cpu$cpu/cpufreq/scaling_governor" 2>/dev/null || echo unknown)"
  lscpu 2>/dev/null | grep -E '^(Model name|Socket\(s\)|NUMA node\(s\)|NUMA node[0-9]+ CPU)' || true
}
where_placed >>"$OUT/gpu.txt" 2>&1 || true
# How steady the host's core is, before the rounds and after them (bench/gpu/host_speed.sh; HOST_RUNS=0 skips it): on a
# core that other guests' work slows by up to three times, as session 32's H100 host did, no number of rounds a call
# can afford resolves 0.5%, and host.txt says so before the ratios do.
host_speed() { # WHEN
  [ "${HOST_RUNS:-20}" -gt 0 ] || return 0
  local line
  line=$(bash "$(dirname "$0")/host_speed.sh" "$first_cpu" "${HOST_RUNS:-20}" "$OUT/host-$1.txt")
  echo "$1: $line" >>"$OUT/host.txt"
}
host_speed before

# The lines `trace --env` prints for a traced directory (`export K=V`), as environment assignments.
env_of() { # DIR [LAYER_SO [--labels on]]
  mkdir -p "$1"
  $W/backscope trace --env --dir "$1" --observer "$C/bb/libbackscope_observer.so" \
    --vklayer "${2:-$C/bb/libbackscope_vklayer.so}" "${@:3}" | sed -n 's/^export //p'
}
env_of $W/probe >"$OUT/trace-env.txt"
rm -f "$OUT/ab-rows.jsonl"
# PIN=CPUS (taskset's list, e.g. 2-9) runs every process on the same cores, so that where the scheduler puts ggml's
# submitting thread is the same for every arm (suspected, not shown, to be part of the several-percent spread between
# processes).
pin=()
[ -n "${PIN:-}" ] && pin=(taskset -c "$PIN")
# NOASLR=1 runs every process without address-space randomisation (`setarch -R`), its environment padded to one size
# (BACKSCOPE_BENCH_PAD), so that the stack starts at the same address in every arm. Suspected, not shown: part of the
# spread between processes is where each process's code and data land relative to one another (which lines share a
# cache set), which randomisation redraws per process. Without the padding, an arm's longer environment (the layer's
# variables) would move its stack by a fixed amount: a bias in place of spread. The same holds for libraries: an arm
# that loads more (the observer, the layer) has everything mapped after them elsewhere in every one of its processes,
# and the padding does not undo that. Shown on a CPU decode (bench/preload_cost.sh, session 41): with addresses fixed,
# preloading a library it never calls cost 0.18% [0.13, 0.25], with randomisation on nothing measurable. So NOASLR=1
# trades spread for a bias of the size of the 0.5% goal's margin, which the A/A control cannot see; the calls since
# session 41 leave it off.
noaslr=()
if [ -n "${NOASLR:-}" ]; then
  noaslr=(setarch "$(uname -m)" -R)
  "${noaslr[@]}" true || { echo "blackbox_cost.sh: NOASLR=1, but setarch -R is refused here" >&2; exit 1; }
fi
padded() { # ASSIGNMENTS… : the assignments, plus BACKSCOPE_BENCH_PAD making their bytes (with NULs) 4,096 in all
  local n=0 a
  for a in "$@"; do n=$((n + ${#a} + 1)); done
  local pad=$((4096 - n - ${#BACKSCOPE_BENCH_PAD_NAME} - 2))
  [ "$pad" -ge 0 ] || { echo "blackbox_cost.sh: an arm's environment is over 4 KiB" >&2; exit 1; }
  printf '%s\n' "$@" "$BACKSCOPE_BENCH_PAD_NAME=$(head -c "$pad" /dev/zero | tr '\0' x)"
}
BACKSCOPE_BENCH_PAD_NAME=BACKSCOPE_BENCH_PAD
# The steal ticks of the pinned cores (every core without PIN), summed: /proc/stat's "cpuN user nice system idle iowait
# irq softirq steal …" lines, the cores taken from PIN's list (a,b-c).
pinned_cpus=()
pins=${PIN:-}
for part in ${pins//,/ }; do
  [ -n "$part" ] || continue
  if [[ $part == *-* ]]; then mapfile -t -O "${#pinned_cpus[@]}" pinned_cpus < <(seq "${part%-*}" "${part#*-}")
  else pinned_cpus+=("$part"); fi
done
steal_ticks() {
  if [ "${#pinned_cpus[@]}" -eq 0 ]; then
    awk '$1 == "cpu" { print $9 }' /proc/stat
  else
    awk -v list=" ${pinned_cpus[*]} " '$1 ~ /^cpu[0-9]+$/ && index(list, " " substr($1, 4) " ") { s += $9 }
      END { print s + 0 }' /proc/stat
  fi
}
clocks() { # LABEL: one line of the GPU's clocks, P-state and temperature
  echo "$1 $(nvidia-smi --query-gpu=clocks.sm,clocks.mem,pstate,temperature.gpu --format=csv,noheader 2>/dev/null |
    tr -d ' ')" >>"$OUT/clocks.txt"
}
# The arms' order turns by one place each round (ORDER=fixed: the same order every round, as every call before
# session 27 ran): round 1 plain env paused, round 2 env paused plain, round 3 paused plain env. With a fixed order an
# arm always runs right after the same other arm and at the same place in the round, so whatever a process leaves
# behind for the next one (the GPU's clocks, the page cache, the driver's files) or a drift within the round falls on
# one arm every time, a bias no number of rounds removes; turned, it falls on every arm alike and is spread, not bias.
# (Consecutive processes are correlated: c21c's lag-1 correlation of plain's process medians is 0.61.)
read -r -a arm_list <<<"${ARMS:-plain env nostats nobb present}"
arms_of_round() { # ROUND: the arms in this round's order
  local n=${#arm_list[@]} i start=0
  [ "${ORDER:-rotate}" = fixed ] || start=$((($1 - 1) % n))
  for ((i = 0; i < n; i++)); do echo "${arm_list[(start + i) % n]}"; done
}
for r in $(seq 1 "${ROUNDS:-20}"); do
  [ -n "${END_S:-}" ] && [ "$SECONDS" -ge "$END_S" ] && break
  for arm in $(arms_of_round "$r"); do
    d=$W/t-$arm-$r
    e=()
    case $arm in
      plain | plain2) ;;
      env) mapfile -t e < <(env_of "$d") ;;
      nostats) mapfile -t e < <(env_of "$d"); e+=(BACKSCOPE_VK_PIPELINE_STATS=0) ;;
      nobb) mapfile -t e < <(env_of "$d"); e+=(BACKSCOPE_VK_BLACKBOX=0 BACKSCOPE_VK_PIPELINE_STATS=0) ;;
      present) mapfile -t e < <(env_of "$d" | grep -v -e '^BACKSCOPE_TRACE_DIR=' -e '^LD_PRELOAD=') ;;
      labels) mapfile -t e < <(env_of "$d" "" --labels on) ;;
      nopre) mapfile -t e < <(env_of "$d" | grep -v '^LD_PRELOAD=') ;;
      nowin) mapfile -t e < <(env_of "$d"); e+=(BACKSCOPE_TRACE_INTERVAL_MS=0) ;;
      noorder) mapfile -t e < <(env_of "$d"); e+=(BACKSCOPE_VK_ORDER=0) ;;
      nomark) mapfile -t e < <(env_of "$d"); e+=(BACKSCOPE_VK_MARKERS=none) ;;
      nofault) mapfile -t e < <(env_of "$d"); e+=(BACKSCOPE_VK_FAULT=0) ;;
      devmark) mapfile -t e < <(env_of "$d"); e+=(BACKSCOPE_VK_MARKER_MEMORY=device) ;;
      min32) mapfile -t e < <(env_of "$d"); e+=(BACKSCOPE_VK_MARKER_MIN_DISPATCHES=32) ;;
      paused) mapfile -t e < <(env_of "$d"); e+=(BACKSCOPE_VK_PAUSED=1) ;;
      bare)
        mapfile -t e < <(env_of "$d")
        e+=(BACKSCOPE_VK_PAUSED=1 BACKSCOPE_VK_MARKERS=none BACKSCOPE_VK_FAULT=0 BACKSCOPE_VK_PIPELINE_STATS=0)
        ;;
      preload) mapfile -t e < <(env_of "$d" | grep -e '^LD_PRELOAD=' -e '^BACKSCOPE_TRACE_DIR=') ;;
      env@*) mapfile -t e < <(env_of "$d" "$C/bb/libbackscope_vklayer-${arm#env@}.so") ;;
      env+*) mapfile -t e < <(env_of "$d"); IFS=+ read -r -a extra <<<"${arm#env+}"; e+=("${extra[@]}") ;;
    esac
    [ -n "${NOASLR:-}" ] && mapfile -t e < <(padded "${e[@]}")
    [ -n "${CLOCKS:-}" ] && clocks "$r $arm before"
    steal0=$(steal_ticks)
    { time env "${e[@]}" "${noaslr[@]}" "${pin[@]}" "$BIN/llama-bench" -m "$MODEL" -ngl 99 ${TESTS:--p 512 -n 128} \
      -r "${REPS:-5}" ${THREADS:+-t "$THREADS"} -o jsonl >$W/ab.jsonl 2>$W/ab.err || true; } 2>$W/ab.time
    steal1=$(steal_ticks)
    [ -n "${CLOCKS:-}" ] && clocks "$r $arm after"
    sed "s/^/$r $arm /" $W/ab.jsonl >>"$OUT/ab-rows.jsonl"
    echo "$r $arm $(cat $W/ab.time) $((steal1 - steal0))" >>"$OUT/times.txt"
    ls "$d" 2>/dev/null | head -3 | sed "s/^/$r $arm trace: /" >>"$OUT/traces.txt" || true
  done
done
host_speed after
python3 bench/gpu/blackbox_ab.py "$OUT" | tee "$OUT/summary.txt"
[ ! -f "$OUT/host.txt" ] || tee -a "$OUT/summary.txt" <"$OUT/host.txt"
du -sh $W/t-env-1 >>"$OUT/summary.txt" 2>&1 || true
