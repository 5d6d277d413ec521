#!/usr/bin/env python3
"""Summarise bench/gpu/overhead_ab.sh results: per-launch cost (launch_ab), in-process decode A/B (decode_ab) with
bootstrap confidence intervals, and the separate-process llama-bench alternation. Prints Markdown tables.
Usage: overhead_summary.py RESULTS_DIR"""
import collections, json, os, random, statistics, sys

d = sys.argv[1]


def rows(name):
    path = os.path.join(d, name)
    if not os.path.exists(path):
        return []
    out = []
    for line in open(path):
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return out


def bootstrap_ci(values, stat=statistics.median, n=2000, seed=1):
    """95% percentile-bootstrap interval of `stat` over `values`."""
    rng = random.Random(seed)
    boots = sorted(stat(rng.choices(values, k=len(values))) for _ in range(n))
    return boots[int(n * 0.025)], boots[int(n * 0.975)]


launch = rows("launch_ab.jsonl")
if launch:
    print("### Per-launch host cost, hook vs runtime in one process (launch_ab, medians)\n")
    print("| run | entry point | runtime ns | through the bound symbol ns | paired difference ns (p10 … p90) |")
    print("|---|---|---|---|---|")
    for r in launch:
        run = "A/A control (no LD_PRELOAD)" if r["run"] == "control" else "observer preloaded"
        print(f"| {run} | `{r['entry']}` | {r['plain_ns']:.1f} | {r['observed_ns']:.1f} | "
              f"{r['paired_diff_ns']:+.1f} ({r['paired_diff_p10']:+.1f} … {r['paired_diff_p90']:+.1f}) |")
    print()

decode = rows("decode_ab.jsonl")
# Each decode_ab run prints its rounds, then its summary line.
runs, rounds = [], []
for r in decode:
    if r.get("summary"):
        runs.append((r, rounds))
        rounds = []
    else:
        rounds.append(r)
if runs:
    print("### Decode tg128 rounds, observer switched in/out of the GOT in one process (decode_ab)\n")
    print("| graphs | arms | groups | A plain t/s | B t/s | median B/A per ABBA group | 95% CI (bootstrap) | "
          "observer's MMVQ launches per observed token |")
    print("|---|---|---|---|---|---|---|---|")
    for s, mine in runs:
        tag = "aa" if s["control"] else "ab"
        group_ts = collections.defaultdict(lambda: {"A": [], "B": []})
        for r in mine:
            group_ts[r["group"]][r["arm"]].append(r["ts"])
        ratios = [statistics.mean(g["B"]) / statistics.mean(g["A"]) for g in group_ts.values() if g["A"] and g["B"]]
        lo, hi = bootstrap_ci(ratios)
        mmvq = "-"
        tpath = os.path.join(d, f"trace-decode-{s['graphs']}-{tag}.json")
        if os.path.exists(tpath):
            t = json.load(open(tpath))
            fam = collections.Counter()
            for k in t["kernels"]:
                fam[k["family"]] += k["launches"]
            tokens = (s["observed_rounds"] + s["warmup_observed_rounds"]) * s["n_gen"]
            mmvq = f"{fam['MMVQ'] / tokens:.2f}" if tokens else f"{fam['MMVQ']} (no observed rounds)"
        arms = "A/A control" if s["control"] else "plain / observed"
        print(f"| {s['graphs']} | {arms} | {s['groups']} | {s['a_ts']:.1f} | {s['b_ts']:.1f} | "
              f"{(statistics.median(ratios) - 1) * 100:+.2f}% | {(lo - 1) * 100:+.2f}% … {(hi - 1) * 100:+.2f}% | {mmvq} |")
    print()

bench = rows("overhead.jsonl")
if bench:
    print("### llama-bench in separate processes, alternating without/with LD_PRELOAD (medians of invocations)\n")
    print("| test | graphs | without t/s | with t/s | change | invocations without / with |")
    print("|---|---|---|---|---|---|")
    for g in ["off", "on"]:
        for t, key in [("pp512", (512, 0)), ("tg128", (0, 128))]:
            v = {m: [r["avg_ts"] for r in bench if r["graphs"] == g and r["mode"] == m and (r["n_prompt"], r["n_gen"]) == key]
                 for m in ["plain", "observed"]}
            if not v["plain"] or not v["observed"]:
                continue
            a, b = statistics.median(v["plain"]), statistics.median(v["observed"])
            print(f"| {t} | {g} | {a:.1f} | {b:.1f} | {(b / a - 1) * 100:+.2f}% | "
                  f"{' '.join(str(round(x)) for x in v['plain'])} / {' '.join(str(round(x)) for x in v['observed'])} |")
    print()
