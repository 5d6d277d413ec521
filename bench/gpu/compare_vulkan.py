#!/usr/bin/env python3
"""The overhead rows of validate_vulkan.sh, as medians and ratios. (The comparison of a trace's dispatches with
GGML_VK_PERF_LOGGER's nodes is examples/compare_vulkan.rs, which uses backscope's own accounting,
src/observe/vulkan/counts.rs: per-token MUL_MAT_ID dispatches, count_experts, helpers and fused groups.)

Usage: compare_vulkan.py --overhead overhead-vulkan.jsonl
"""
import json
import statistics
import sys


def overhead(path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    out = {}
    for test in sorted({(r["n_prompt"], r["n_gen"]) for r in rows}):
        label = f"pp{test[0]}" if test[0] else f"tg{test[1]}"
        med = {}
        for mode in ("plain", "layer", "layer-markers"):
            ts = [r["avg_ts"] for r in rows if (r["n_prompt"], r["n_gen"]) == test and r["mode"] == mode]
            if ts:
                med[mode] = statistics.median(ts)
        line = "  ".join(f"{m} {v:.1f} t/s" for m, v in med.items())
        ratios = {m: v / med["plain"] for m, v in med.items() if m != "plain" and "plain" in med}
        print(f"{label}: {line}   " + "  ".join(f"{m}/plain {r:.4f} ({(r - 1) * 100:+.2f}% throughput)" for m, r in ratios.items()))
        out[label] = {"median_tps": med, "ratio_to_plain": ratios}
    return out


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] != ["--overhead"] or len(args) != 2:
        sys.exit(__doc__)
    print(json.dumps(overhead(args[1])))
