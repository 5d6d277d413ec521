#!/usr/bin/env bash
# Validate the host identity a run stores (issue 19, item 2: src/host/identity.rs) on a GPU machine:
#   1. `backscope sweep import` of one llama-bench line into a fresh SQLite file: the run stores this host's
#      identity (runs.host_json) read from /proc, sysfs, KFD and /proc/driver/nvidia;
#   2. compare it with independent sources: nvidia-smi's GPU names and driver version, `uname -r`, `hostname`,
#      lspci's display controllers (PCI addresses), and on AMD hosts rocminfo/KFD's gfx names when present.
# Usage: bench/gpu/validate_host.sh CARRY_DIR OUT_DIR   (CARRY_DIR holds the `backscope` binary)
# Results: OUT_DIR/summary.txt (PASS/FAIL per check), OUT_DIR/host.json (what was stored).
set -euo pipefail
CARRY=$(realpath "$1")
OUT=$(realpath "$2")
BS="$CARRY/backscope"
W=$(mktemp -d /tmp/bshost.XXXX)
mkdir -p "$OUT"
chmod +x "$BS" 2>/dev/null || true
: >"$OUT/summary.txt"
check() { if [ "$2" = "$3" ]; then echo "PASS $1: $2" ; else echo "FAIL $1: stored '$2', expected '$3'"; fi | tee -a "$OUT/summary.txt"; }

cat >"$W/bench.jsonl" <<'JSONL'
{"build_commit": "abc1234", "build_number": 11434, "model_filename": "/m/tiny.gguf", "n_gpu_layers": 99, "n_prompt": 64, "n_gen": 0, "n_depth": 0, "test_time": "2026-11-21T12:00:00Z", "avg_ns": 1361702127, "stddev_ns": 1000000, "avg_ts": 47.0, "stddev_ts": 0.5, "samples_ns": [1361702127], "samples_ts": [47.0]}
JSONL
"$BS" sweep import "$W/bench.jsonl" --db "$W/h.db" --runs-dir "$W/runs" >/dev/null
python3 - "$W/h.db" >"$OUT/host.json" <<'PY'
import json, sqlite3, sys
row = sqlite3.connect(sys.argv[1]).execute("SELECT host_json FROM runs").fetchone()
print(json.dumps(json.loads(row[0]), indent=2))
PY
stored() { python3 -c "import json,sys; h=json.load(open('$OUT/host.json')); print($1)"; }

check hostname "$(stored "h['hostname']")" "$(hostname)"
check kernel "$(stored "h['kernel']")" "$(uname -r)"
if command -v nvidia-smi >/dev/null; then
  check nvidia-driver "$(stored "h['runtimes'].get('nvidia','')")" \
    "$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"
  check nvidia-gpus "$(stored "'|'.join(sorted(g['name'] or '' for g in h['gpus'] if g['vendor']=='nvidia'))")" \
    "$(nvidia-smi --query-gpu=name --format=csv,noheader | sort | paste -sd'|')"
  check nvidia-pci "$(stored "'|'.join(sorted((g['pci'] or '').lower() for g in h['gpus'] if g['vendor']=='nvidia'))")" \
    "$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader | sed 's/^0000//' | tr 'A-F' 'a-f' | sort | paste -sd'|')"
fi
if [ -d /sys/class/kfd/kfd/topology/nodes ] && command -v rocminfo >/dev/null; then
  check amd-archs "$(stored "'|'.join(sorted(g['arch'] or '' for g in h['gpus'] if g['vendor']=='amd'))")" \
    "$(rocminfo | awk '/Name: *gfx/ {print $2}' | sort | paste -sd'|')"
fi
rm -rf "$W"
grep -q FAIL "$OUT/summary.txt" && exit 1 || exit 0
