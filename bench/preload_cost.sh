#!/usr/bin/env bash
# Benchmark: does loading a library a process never calls move its decode speed, in separate processes with address
# randomisation off and the environment padded to one size, as bench/gpu/blackbox_cost.sh runs its rounds (NOASLR=1)?
# `trace --env` preloads the CUDA/HIP observer into every process of a service, and a Vulkan or CPU llama.cpp never
# calls what it interposes; where the loaded libraries land moves where everything mapped after them lands, which
# with randomisation off is the same in every process of an arm: a bias a process-level A/B cannot average away. Here
# on the CPU backend (no layer, no GPU), so that nothing else differs: arms plain, preload (LD_PRELOAD=LIBRARY) and
# plain2 (the A/A control) in a turning order, each process llama-bench tg32 -r 7 -t 1 pinned to one core, read
# from its fastest repetition; printed: each arm's median ratio to plain over the rounds with a bootstrap 95% interval.
# ASLR=1 leaves address randomisation on (each process's libraries then land at a random offset, arms alike): what
# stays is what loading the library does, what goes is where a fixed layout put the rest.
# Usage: [SECS=1200] [CORE=1] [ASLR=1] bench/preload_cost.sh LIBRARY   (e.g. target/release/libbackscope_observer.so);
#   needs scripts/llama-build.sh cpu's build and `backscope` on PATH or in target/release.
set -euo pipefail
cd "$(dirname "$0")/.."
LIBRARY=$(realpath "$1")
SECS="${SECS:-1200}"
BIN=$(bash scripts/llama-build.sh cpu)
BACKSCOPE=$(command -v backscope || echo target/release/backscope)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
PATH="$BIN:$PATH" "$BACKSCOPE" synth --preset tiny --type q4_k_m -o "$WORK/tiny.gguf" >/dev/null
# The assignments, plus PAD making their bytes 2,048 in all, so that the stack starts at the same address in every arm.
padded() {
  local n=0 a
  for a in "$@"; do n=$((n + ${#a} + 1)); done
  printf '%s\n' "$@" "PAD=$(head -c $((2048 - n - 5)) /dev/zero | tr '\0' x)"
}
noaslr=(setarch "$(uname -m)" -R)
[ -n "${ASLR:-}" ] && noaslr=()
arms=(plain preload plain2)
end=$(($(date +%s) + SECS))
r=0
while [ "$(date +%s)" -lt "$end" ]; do
  r=$((r + 1))
  for i in 0 1 2; do
    arm=${arms[$(((r + i) % 3))]}
    e=("LD_LIBRARY_PATH=$BIN")
    [ "$arm" = preload ] && e+=("LD_PRELOAD=$LIBRARY")
    mapfile -t e < <(padded "${e[@]}")
    env -i "${e[@]}" "${noaslr[@]}" taskset -c "${CORE:-1}" "$BIN/llama-bench" -m "$WORK/tiny.gguf" -p 0 \
      -n 32 -r 7 -t 1 -o jsonl 2>/dev/null | sed "s/^/$r $arm /" >>"$WORK/rows"
  done
done
python3 - "$WORK/rows" <<'PY'
import collections, json, random, statistics as st, sys
fastest = collections.defaultdict(dict)  # round -> arm -> the process's fastest repetition, t/s
for line in open(sys.argv[1]):
    r, arm, rest = line.split(' ', 2)
    fastest[int(r)][arm] = max(json.loads(rest)['samples_ts'])
random.seed(1)
for arm in ('preload', 'plain2'):
    ratios = [v[arm] / v['plain'] - 1 for v in fastest.values() if arm in v and 'plain' in v]
    boots = sorted(st.median(random.choices(ratios, k=len(ratios))) for _ in range(2000))
    print('tg32 %-8s fastest vs plain %+.3f%% [%+.3f, %+.3f] (rounds %d)' % (
        arm, 100 * st.median(ratios), 100 * boots[50], 100 * boots[1949], len(ratios)))
PY
