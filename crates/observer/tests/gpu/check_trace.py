#!/usr/bin/env python3
"""Checks observer traces against a probe's "expect API NAME launches=N graph=G captured=C" lines.

usage: check_trace.py PROBE_STDOUT TRACE_DIR
Prints kernels that were seen but not expected (e.g. none for cuBLAS: its launches bypass the
exported entry points). Exit status 1 on any mismatch.
"""
import glob
import json
import sys

expected = {}
for line in open(sys.argv[1]):
    if line.startswith("expect "):
        _, api, name, *fields = line.split()
        expected[(api, name)] = {k: int(v) for k, v in (f.split("=") for f in fields)}

seen = {}
for path in glob.glob(sys.argv[2] + "/trace-*.jsonl"):
    names = {}
    for line in open(path):
        record = json.loads(line)
        if "kernel" in record:
            names[record["kernel"]] = (record["api"], record["name"])
            seen.setdefault(names[record["kernel"]], {"launches": 0, "graph": 0, "captured": 0})
        for key, field in (("counts", "launches"), ("graph", "graph"), ("captured", "captured")):
            for kernel, n in record.get(key, []):
                seen[names[kernel]][field] += n

failed = False
for key, want in sorted(expected.items()):
    got = seen.get(key)
    ok = got is not None and all(got[f] == want[f] for f in want)
    failed |= not ok
    print(("ok      " if ok else "MISMATCH"), key, "expected", want, "got", got)
for key in sorted(set(seen) - set(expected)):
    print("unexpected", key, seen[key])
sys.exit(1 if failed else 0)
