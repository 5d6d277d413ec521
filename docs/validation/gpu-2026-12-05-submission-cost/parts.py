#!/usr/bin/env python3
"""Per-token cost of each timed part, observing − paused, from the `exp:` lines a calls.sh run printed.

Usage: python3 parts.py cN/output-tail.txt [TOKENS]

Each arm prints its timing twice: the A/A control (2 observed rounds) and the A/B (82 observed rounds of tg128). The
A/B's lines are the ones with the most calls; TOKENS (default 82 × 128) divides their totals. `app` runs from one
dispatch hook's exit to the next one's entry, so it holds the bind, end and submission parts too: `app + dispatch`
is the whole per-token difference; the other columns say where it goes.
"""
import re
import sys

PARTS = ["app", "bind_pre", "bind_drv", "dispatch_pre", "dispatch_drv", "end_pre", "end_drv", "submit_pre",
         "submit_drv", "submit_post"]
LINE = re.compile(r"(\w+): exp: (observing|paused) (\w+) n=(\d+) mean_ns=[\d.]+ total_ms=([\d.]+)")
AB = re.compile(r"(\w+): summary tg128 A/B: .* median B/A per group (\S+) \[(\S+), (\S+)\]")


def main():
    path = sys.argv[1]
    tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 82 * 128
    arms, ab = {}, {}
    for line in open(path):
        m = AB.match(line)
        if m:
            ab[m.group(1)] = f"{m.group(2)} [{m.group(3)} {m.group(4)}]"
        m = LINE.match(line)
        if m:
            arm, mode, part, n, total = m.groups()
            arms.setdefault(arm, {}).setdefault((mode, part), []).append((int(n), float(total)))
    print("arm | A/B median [95%] | " + " | ".join(PARTS) + " | bind | app+dispatch (µs/token)")
    for arm, parts in arms.items():
        diff = {}
        for p in PARTS:
            o, q = parts.get(("observing", p)), parts.get(("paused", p))
            if o and q:
                diff[p] = (max(o)[1] - max(q)[1]) * 1000 / tokens
        bind = diff.get("bind_pre", 0) + diff.get("bind_drv", 0)
        whole = diff.get("app", 0) + diff.get("dispatch_pre", 0) + diff.get("dispatch_drv", 0)
        cells = [f"{diff[p]:+.1f}" if p in diff else "" for p in PARTS]
        print(f"{arm} | {ab.get(arm, '')} | " + " | ".join(cells) + f" | {bind:+.1f} | {whole:+.1f}")


main()
