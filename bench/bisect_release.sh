#!/usr/bin/env bash
# Benchmark: a bisect step from llama.cpp release archives (`--builds release:URL`), cold (download + check + unpack
# into an empty cache) and cached, against the compiling steps of BENCHMARKS.md's "bisect builds"; and a whole
# bisect over b11200…b11223 both ways.
#
#   bench/bisect_release.sh [RUNS]      (default 5)
#
# The archives are packed as tests/bisect/release_archives.rs packs them (llama.cpp's release commands: the build's bin/
# with RUNPATH $ORIGIN by chrpath, `tar -czf … --transform 's,^\.,llama-bNNNN,'`) from the CPU builds
# scripts/bisect-builds.sh leaves in the cache, and served by Python's http.server on the loopback, so the network
# is not measured: what a step costs beyond its download. Each cold run gets a fresh BACKSCOPE_CACHE; each cached
# run reuses the one the cold runs filled. Printed: the median of RUNS for each, per build, as
# examples/prepare_builds.rs reports them ("ready in", whole seconds hidden: the wall time is measured here).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-5}"
BUILDS=(b11200 b11205 b11218 b11223)
CACHE="${BACKSCOPE_CACHE:-$HOME/.cache/backscope}"
cargo build --release -q --example prepare_builds
cargo build --release -q
BIN=target/release/backscope
PREP=target/release/examples/prepare_builds
WORK=$(mktemp -d)
SERVER=""
cleanup() { [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT

# The archives.
for b in "${BUILDS[@]}"; do
  bin=$(BACKSCOPE_CACHE="$CACHE" "$PREP" pypi cpu 2 "$b" | sed -n 's/.* \(\/.*\)$/\1/p')
  stage="$WORK/stage-$b"
  mkdir -p "$stage" "$WORK/www/$b"
  cp -a "$bin"/. "$stage"/
  for f in "$stage"/*; do
    if [ -f "$f" ] && [ "$(head -c4 "$f" | od -An -c | tr -d ' ')" = "177ELF" ] && chrpath -l "$f" >/dev/null 2>&1; then
      chrpath -r '$ORIGIN' "$f" >/dev/null
    fi
  done
  tar -czf "$WORK/www/$b/llama-$b-bin-ubuntu-x64.tar.gz" --transform "s,^\.,llama-$b," -C "$stage" .
done
echo "archives: $(du -b "$WORK"/www/*/*.tar.gz | awk '{s += $1} END {printf "%.1f MB", s / 1e6}') for ${#BUILDS[@]} builds; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"

PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
python3 -m http.server --bind 127.0.0.1 --directory "$WORK/www" "$PORT" >/dev/null 2>&1 &
SERVER=$!
for _ in $(seq 100); do python3 -c "import socket; socket.create_connection(('127.0.0.1', $PORT))" 2>/dev/null && break; sleep 0.1; done
SOURCE="release:http://127.0.0.1:$PORT/{build}/llama-{build}-bin-ubuntu-x64.tar.gz"

median() { sort -n | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
now() { date +%s.%N; }
fresh() { local d; d=$(mktemp -d -p "$WORK"); chmod 700 "$d"; echo "$d"; }

# One step: prepare one build (cold: in a fresh cache; cached: in the cache the last cold run filled).
declare -A COLD WARM
for b in "${BUILDS[@]}"; do
  cold=(); warm=()
  for _ in $(seq "$RUNS"); do
    c=$(fresh)
    t0=$(now); BACKSCOPE_CACHE="$c" "$PREP" "$SOURCE" cpu 2 "$b" >"$c/cold.out" 2>&1; t1=$(now)
    BACKSCOPE_CACHE="$c" "$PREP" "$SOURCE" cpu 2 "$b" >"$c/warm.out" 2>&1; t2=$(now)
    # A step that failed, or that did not come from where it should, is no measurement.
    grep -q "from cache: false" "$c/cold.out" || { cat "$c/cold.out" >&2; exit 1; }
    grep -q "from cache: true" "$c/warm.out" || { cat "$c/warm.out" >&2; exit 1; }
    cold+=("$(echo "$t1 - $t0" | bc)"); warm+=("$(echo "$t2 - $t1" | bc)")
    rm -rf "$c"
  done
  COLD[$b]=$(printf '%s\n' "${cold[@]}" | median)
  WARM[$b]=$(printf '%s\n' "${warm[@]}" | median)
  printf '%s: one step cold (download + unpack) %.2f s, cached %.2f s (median of %s)\n' "$b" "${COLD[$b]}" "${WARM[$b]}" "$RUNS"
done

# A whole bisect (the test of tests/bisect/pypi_builds.rs: does `llama-server --help` list --rpc), cold and cached.
TEST='help=$("$BACKSCOPE_BIN_DIR/llama-server" --help 2>&1) || true
case "$help" in *--host*) ;; *) exit 125 ;; esac
if printf "%s\n" "$help" | grep -qE -e "(^|[ ,])--rpc( |,|$)"; then exit 1; fi
exit 0'
bcold=(); bwarm=()
for i in $(seq "$RUNS"); do
  c=$(fresh)
  for phase in cold warm; do
    t0=$(now)
    BACKSCOPE_CACHE="$c" "$BIN" bisect --good b11200 --bad b11223 --builds "$SOURCE" --backend cpu \
      --db "$c/$phase-$i.db" --runs-dir "$c/runs" --json -- sh -c "$TEST" >"$c/$phase.json" 2>/dev/null
    t1=$(now)
    if [ "$phase" = cold ]; then bcold+=("$(echo "$t1 - $t0" | bc)"); else bwarm+=("$(echo "$t1 - $t0" | bc)"); fi
  done
  grep -q '"from_cache": *false' "$c/cold.json" 2>/dev/null || python3 -c 'import json, sys
s = json.load(open(sys.argv[1]))["steps"]
assert len(s) == 4 and not all(x["from_cache"] for x in s), s' "$c/cold.json"
  python3 -c 'import json, sys
s = json.load(open(sys.argv[1]))["steps"]
assert len(s) == 4 and all(x["from_cache"] for x in s), s' "$c/warm.json"
  verdict=$(python3 -c 'import json, sys; v = json.load(open(sys.argv[1]))["verdict"]; print(v["kind"], v["last_good"], v["first_bad"])' "$c/warm.json")
  rm -rf "$c"
done
printf 'whole bisect b11200..b11223 (4 steps, verdict: %s): cold %.2f s, cached %.2f s (median of %s)\n' \
  "$verdict" "$(printf '%s\n' "${bcold[@]}" | median)" "$(printf '%s\n' "${bwarm[@]}" | median)" "$RUNS"
