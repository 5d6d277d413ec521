#!/usr/bin/env python3
"""Compare `backscope trace --json` of a Vulkan llama.cpp run with ggml-vulkan's own GGML_VK_PERF_LOGGER output of
the same run: dispatches per ggml op (each Vulkan pipeline row carries the op its data-file rule gives it) against the
perf logger's graph nodes per op. Helper dispatches (split-k reductions; `helper: true`) are listed apart: a node
issues at most one of each. Also the overhead rows of validate_vulkan.sh, as medians and ratios.

Usage: compare_vulkan.py SUMMARY.json PERF.log [SUMMARY.json PERF.log …]     (exit 1 on a mismatch)
       compare_vulkan.py --overhead overhead-vulkan.jsonl
"""
import json
import re
import statistics
import sys

OP = re.compile(r"^[A-Z][A-Z0-9_]*$")


def op_of(token):
    op = token.split("(")[0]
    return op if OP.match(op) else None


def perf_logger(path):
    """Node entries per op, summed over every `Vulkan Timings:` block (NAME: COUNT x AVG us = TOTAL us)."""
    nodes = {}
    for line in open(path, errors="replace"):
        name, sep, rest = line.partition(": ")
        if not sep or " x " not in rest:
            continue
        try:
            count = int(rest.split(" x ")[0])
        except ValueError:
            continue
        tokens = name.split(" ")
        first = op_of(tokens[0])
        if first is None:
            continue
        node = (op_of(tokens[1]) if len(tokens) > 1 else None) or first
        nodes[node] = nodes.get(node, 0) + count
    return nodes


def compare(summary_path, perf_path):
    summary = json.loads(open(summary_path).read().strip().splitlines()[-1])
    main, helpers, unmapped = {}, {}, []
    for k in summary["kernels"]:
        if k.get("api") != "vulkan":
            continue
        if not k.get("op"):
            unmapped.append(k["name"])
            continue
        into = helpers if k.get("helper") else main
        into[k["op"]] = into.get(k["op"], 0) + k["launches"]
    nodes = perf_logger(perf_path)
    ok = not unmapped and main == nodes and all(n <= nodes.get(op, 0) for op, n in helpers.items())
    print(f"{summary_path}: {'EQUAL' if ok else 'DIFFERENT'}")
    for op in sorted(set(main) | set(nodes)):
        mark = "" if main.get(op, 0) == nodes.get(op, 0) else "   <-- differs"
        print(f"  {op:22} layer {main.get(op, 0):8}   perf logger {nodes.get(op, 0):8}{mark}")
    for op, n in sorted(helpers.items()):
        print(f"  {op:22} + {n} helper dispatches (at most one per node: {nodes.get(op, 0)})")
    for name in unmapped:
        print(f"  {name}: no op in data/vulkan_pipelines.toml")
    devices = summary.get("devices", [])
    for d in devices:
        print(f"  device {d['name']} ({d['driver']} {d['driver_info']}): int dot {d['integer_dot']}, "
              f"coopmat {d['cooperative_matrix']}, subgroup {d['subgroup_size']}")
    return ok, {"summary": summary_path, "equal": ok, "layer": main, "perf_logger": nodes, "helpers": helpers,
                "unmapped": unmapped, "devices": devices}


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
    if args[:1] == ["--overhead"]:
        print(json.dumps(overhead(args[1])))
        sys.exit(0)
    results, all_ok = [], True
    for summary_path, perf_path in zip(args[0::2], args[1::2]):
        ok, r = compare(summary_path, perf_path)
        all_ok &= ok
        results.append(r)
    print(json.dumps(results))
    sys.exit(0 if all_ok else 1)
