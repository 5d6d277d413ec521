#!/usr/bin/env bash
# Score `backscope logs` on the corpus of real pasted logs (tests/data/logs-corpus) against the human readings and
# print the per-log table and the totals, through the thresholds test that `.ci/run` also runs. Exit
# status: the test's (0 when the thresholds hold).
# Usage: scripts/logs-corpus-score.sh [TABLE.md]   (also writes the table to TABLE.md when given)
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $# -ge 1 ]]; then
    export LOGS_CORPUS_TABLE="$(realpath -m "$1")"
fi
exec cargo test -q -p backscope --test tests logs_corpus_meets_its_scoring_thresholds -- --nocapture --test-threads=1
