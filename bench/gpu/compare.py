#!/usr/bin/env python3
"""Compare `backscope trace` counts with Nsight Compute's kernel list, per kernel name, for every case that
bench/gpu/validate_trace.sh ran; summarise the overhead runs. Prints Markdown (for docs/trace-validation.md).
Usage: compare.py RESULTS_DIR"""
import collections, csv, io, json, os, statistics, sys

from ncu_csv import ncu_counts

d = sys.argv[1]


def counts_json(path):
    """The compact form kept in docs/validation: {mangled name: launches}, made from the ncu CSV."""
    return collections.Counter(json.load(open(path))) if os.path.exists(path) else None

def trace_counts(path):
    try:
        s = json.load(open(path))
    except Exception:
        return None, None
    c = collections.Counter()
    fam = collections.Counter()
    for k in s["kernels"]:
        ok = k["launches"] - k["errors"]
        c[k["name"]] += ok
        fam[k["family"]] += ok
    return c, fam

print("| case | graphs | trace launches | ncu launches | kernels equal | differing kernels | MMVQ | MMQ | vendor/other (trace) |")
print("|---|---|---|---|---|---|---|---|---|")
for case in ["p1", "p8", "p9", "p64", "p256", "p257", "p512", "tg16"]:
    for graphs in ["on", "off"]:
        t, fam = trace_counts(os.path.join(d, f"trace-{case}-{graphs}.json"))
        n = ncu_counts(os.path.join(d, f"ncu-{case}-{graphs}.csv")) or counts_json(os.path.join(d, f"ncu-{case}-{graphs}.counts.json"))
        if t is None or n is None:
            print(f"| {case} | {graphs} | {'-' if t is None else sum(t.values())} | {'-' if n is None else sum(n.values())} | missing | | | | |")
            continue
        names = set(t) | set(n)
        diff = sorted((name for name in names if t[name] != n[name]), key=lambda x: -abs(t[x] - n[x]))
        equal = len(names) - len(diff)
        shown = "; ".join(f"{x[:60]} trace {t[x]} ncu {n[x]}" for x in diff[:3])
        print(f"| {case} | {graphs} | {sum(t.values())} | {sum(n.values())} | {equal}/{len(names)} | {shown} | {fam['MMVQ']} | {fam['MMQ']} | {fam['vendor-BLAS']}/{fam['other']} |")

path = os.path.join(d, "overhead.jsonl")
if os.path.exists(path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    print("\n| test | graphs | without observer (t/s, median of 5) | with observer | change |")
    print("|---|---|---|---|---|")
    for graphs in ["on", "off"]:
        for test in ["pp512", "tg128"]:
            vals = {}
            for mode in ["plain", "observed"]:
                v = [r["avg_ts"] for r in rows if r["graphs"] == graphs and r["mode"] == mode and
                     (r["n_prompt"], r["n_gen"]) == ((512, 0) if test == "pp512" else (0, 128))]
                vals[mode] = statistics.median(v) if v else float("nan")
            ch = (vals["observed"] / vals["plain"] - 1) * 100
            print(f"| {test} | {graphs} | {vals['plain']:.1f} | {vals['observed']:.1f} | {ch:+.2f}% |")
