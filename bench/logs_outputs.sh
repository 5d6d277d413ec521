#!/usr/bin/env bash
# Snapshot what `backscope logs` says about every log the repository holds, to check that a change to the
# logs crate (a faster path, say) changes no output: run it before and after, then `diff -r BEFORE AFTER`.
#
#   bench/logs_outputs.sh BACKSCOPE_BIN LOGS_EXAMPLE_BIN OUTDIR
#
# Writes OUTDIR/json/NAME.json (`backscope logs --json`) and OUTDIR/events/NAME.tsv (the example's
# `--events`: every line's event kind, so a change in how one uninteresting line is read shows too) for
# each log of tests/data/logs-corpus and crates/logs/tests/data.
set -euo pipefail
BIN=$(realpath "$1") EXAMPLE=$(realpath "$2") OUT=$(realpath -m "$3")
cd "$(dirname "$0")/.."
mkdir -p "$OUT/json" "$OUT/events"
for f in tests/data/logs-corpus/*.log crates/logs/tests/data/*.log; do
  name=$(basename "$(dirname "$f")")-$(basename "$f" .log)
  "$BIN" logs --json "$f" >"$OUT/json/$name.json" 2>&1 || echo "exit $?" >>"$OUT/json/$name.json"
  "$EXAMPLE" "$f" --events >"$OUT/events/$name.tsv" 2>&1 || echo "exit $?" >>"$OUT/events/$name.tsv"
done
echo "$(ls "$OUT/json" | wc -l) logs written to $OUT"
