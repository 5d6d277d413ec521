#!/usr/bin/env python3
"""Compare `backscope trace` counts with Nsight Compute's kernel list, per mangled kernel name, for the cases
bench/gpu/validate_blas.sh ran (vendor-BLAS kernels included), or (--overhead) summarise its overhead runs.
Prints Markdown. Usage: compare_blas.py [--overhead] RESULTS_DIR"""
import collections, csv, io, json, os, statistics, sys

from ncu_csv import ncu_counts

VENDOR_PREFIXES = ("sm90_", "sm80_", "sm75_", "sm70_", "ampere_", "volta_", "turing_", "maxwell_", "nvjet",
                   "cutlass", "gemv2", "gemvx", "gemmk1", "gemmSN", "cublas")

def vendor(name):
    """Whether Nsight Compute's name is a cuBLAS/cuBLASLt/CUTLASS kernel (the prefixes of data/kernel_families.toml)."""
    return name.startswith(VENDOR_PREFIXES) or "cublasLt" in name or "cutlass" in name or "xmma_gemm" in name


def trace_counts(path):
    try:
        s = json.load(open(path))
    except Exception:
        return None, None
    counts, libraries = collections.Counter(), collections.Counter()
    for k in s["kernels"]:
        ok = k["launches"] - k["errors"]
        counts[k["name"]] += ok
        if k.get("family") == "vendor-BLAS":
            libraries[k.get("library") or "?"] += ok
    return counts, libraries

def compare(d):
    print("| case | trace launches | ncu launches | kernels equal | vendor-BLAS trace / ncu | libraries (trace) | differing kernels |")
    print("|---|---|---|---|---|---|---|")
    for case in ["f16-p100", "f16-p512", "q4km-p100", "q4km-p512"]:
        t, libraries = trace_counts(os.path.join(d, f"trace-{case}.json"))
        n = ncu_counts(os.path.join(d, f"ncu-{case}.csv"))
        if t is None or n is None:
            print(f"| {case} | {'-' if t is None else sum(t.values())} | {'-' if n is None else sum(n.values())} | missing | | | |")
            continue
        names = set(t) | set(n)
        diff = sorted((x for x in names if t[x] != n[x]), key=lambda x: -abs(t[x] - n[x]))
        vt = sum(c for x, c in t.items() if vendor(x))
        vn = sum(c for x, c in n.items() if vendor(x))
        libs = ", ".join(f"{lib} {c}" for lib, c in sorted(libraries.items()))
        shown = "; ".join(f"{x[:60]} trace {t[x]} ncu {n[x]}" for x in diff[:3])
        print(f"| {case} | {sum(t.values())} | {sum(n.values())} | {len(names) - len(diff)}/{len(names)} | {vt} / {vn} | {libs} | {shown} |")

def overhead(d):
    path = os.path.join(d, "overhead.jsonl")
    rows = [json.loads(l) for l in open(path) if l.strip()] if os.path.exists(path) else []
    arms = [a for a in ("plain", "observed", "old") if any(r["arm"] == a for r in rows)]
    print("\n| test (F16) | " + " | ".join(f"{a} t/s (median)" for a in arms) + " | observed vs plain | observed vs old |")
    print("|---|" + "---|" * len(arms) + "---|---|")
    for test, shape in (("pp512", (512, 0)), ("tg128", (0, 128))):
        med = {}
        for a in arms:
            v = [r["avg_ts"] for r in rows if r["arm"] == a and (r["n_prompt"], r["n_gen"]) == shape]
            med[a] = statistics.median(v) if v else float("nan")
        vs_plain = (med["observed"] / med["plain"] - 1) * 100 if "observed" in med else float("nan")
        vs_old = (med["observed"] / med["old"] - 1) * 100 if "old" in med else float("nan")
        print(f"| {test} | " + " | ".join(f"{med[a]:.1f}" for a in arms) + f" | {vs_plain:+.2f}% | {vs_old:+.2f}% |")

if __name__ == "__main__":
    if sys.argv[1] == "--overhead":
        overhead(sys.argv[2])
    else:
        compare(sys.argv[1])
