#!/usr/bin/env python3
"""Compares what two backscope Vulkan traces dispatched, pipeline by pipeline: the pipeline's name, the SPIR-V
shader it was made from (the layer's hash of the module ggml created, taken before impersonation swaps it) and the
number of dispatches. Used to hold an impersonated run on lavapipe against a real run on the profiled device.

usage: compare_dispatch.py REAL_TRACE.jsonl IMPERSONATED_TRACE.jsonl
Prints one line per difference and a last line `EQUAL n pipelines, m dispatches` or `DIFFERENT k of n`; exits 0
when equal, 1 when not, 2 on unreadable input."""
import json
import sys
from collections import Counter


def dispatched(path):
    kernels, counts, device = {}, Counter(), None
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a crash or the byte cap; the rest of the file still counts
            if "kernel" in rec and "name" in rec:
                kernels[rec["kernel"]] = (rec["name"], rec.get("spirv_hash"))
            elif "window" in rec:
                for kernel_id, n in rec.get("counts", []):
                    counts[kernel_id] += n
            elif "device" in rec and device is None:
                device = rec
    total = Counter()
    for kernel_id, n in counts.items():
        total[kernels.get(kernel_id, (f"kernel {kernel_id}", None))] += n
    return total, device


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        real, real_dev = dispatched(sys.argv[1])
        imp, imp_dev = dispatched(sys.argv[2])
    except OSError as e:
        print(f"unreadable: {e}", file=sys.stderr)
        return 2
    keys = sorted(set(real) | set(imp), key=lambda k: (k[0], k[1] or ""))
    differ = [k for k in keys if real.get(k, 0) != imp.get(k, 0)]
    for name, spirv in differ:
        print(f"  {name} [{spirv}]: real {real.get((name, spirv), 0)}, impersonated {imp.get((name, spirv), 0)}")
    if imp_dev and "impersonated" not in imp_dev:
        print("  the second trace's device record says it was not impersonated")
        differ.append(("device", None))
    if not differ:
        print(f"EQUAL {len(keys)} pipelines, {sum(real.values())} dispatches")
        return 0
    print(f"DIFFERENT {len(differ)} of {len(keys)} pipelines")
    return 1


if __name__ == "__main__":
    sys.exit(main())
