#!/usr/bin/env python3
# Summarises bench/gpu/blackbox_h200.sh's and blackbox_cost.sh's cost runs: per test and arm, the median over rounds of
# the arm's t/s over the plain run's of the same round, with a bootstrap 95% interval of that median. A process's t/s is
# the median of its repetitions' samples (ab-rows.jsonl, llama-bench -o jsonl), or llama-bench's mean where only its
# CSV was kept (ab-rows.txt with ab-header.csv, the runs before 2026-12-03). Then where the spread is, so that a harness
# can be judged by it: the repetitions' spread within a process, the processes' spread within an arm, and the spread of
# the per-round ratios (what the interval is made of).
# Where the repetitions were kept (ab-rows.jsonl), the same ratios again with each process's *fastest* repetition
# (the "fastest" lines): on a machine whose interference only ever slows a run down (a second machine state, a neighbour),
# the fastest of N repetitions is the least disturbed, and the layer's cost, CPU work on every token, is in every
# repetition (Chen & Revels, "Robust benchmarking in noisy environments", 2016, arXiv:1608.04295, argue for the
# minimum time on this ground). Both are printed; neither replaces the other.
# Usage: [BASE=ARM] blackbox_ab.py OUT_DIR [OUT_DIR…] (several directories of one machine start and one build are
# pooled, their rounds kept apart). BASE (default plain) is the arm the others are compared with, round by round: with
# ARMS="plain env env@old", BASE=env@old compares the two layer builds directly. STEAL_MAX=N keeps only the rounds in
# which no process was kept off its cores by the hypervisor for more than N clock ticks (times.txt's STEAL column,
# blackbox_cost.sh since session 32; a directory without it keeps no round): a split by a fact about the machine that
# no arm's own work moves, to be chosen before the ratios are looked at. FIRST_REPS=K reads only each process's first K
# repetitions, as if the call had run REPS=K: how the interval narrows with repetitions, to size the next calls' shape.
import collections, csv, io, json, os, random, statistics as st, sys

rows = collections.defaultdict(dict)  # (test, arm) -> {round: t/s}
fastest = collections.defaultdict(dict)  # (test, arm) -> {round: the process's fastest repetition, t/s}
rep_cv = collections.defaultdict(list)  # (test, arm) -> [coefficient of variation of one process's repetitions]
arms = []
BASE = os.environ.get('BASE', 'plain')


def add(r, arm, test, value):
    rows[(test, arm)][r] = value
    if arm not in arms:
        arms.append(arm)


STEAL_MAX = os.environ.get('STEAL_MAX')
FIRST_REPS = int(os.environ['FIRST_REPS']) if os.environ.get('FIRST_REPS') else None


# What the machine did to each arm's processes (times.txt: wall, user and system seconds, and since session 32 the
# hypervisor's steal ticks on the pinned cores): a state of the host shows here in every arm alike, an arm's own cost
# only in its own user seconds.
machine = collections.defaultdict(list)  # arm -> [(user seconds, steal ticks or None)]


def read_times(d0):
    """Adds d0's times.txt to `machine`; returns the rounds with a process stolen from for more than STEAL_MAX ticks
    ({'*'}: every round, where no process has a steal column to keep it), or None where STEAL_MAX is not set."""
    kept, out = set(), set()
    if os.path.exists(d0 + '/times.txt'):
        for line in open(d0 + '/times.txt'):
            f = line.split()
            if len(f) >= 5:
                steal = int(f[5]) if len(f) >= 6 else None
                machine[f[1]].append((float(f[3]), steal))
                if steal is not None and STEAL_MAX is not None:
                    (out if steal > int(STEAL_MAX) else kept).add(f[0])
    if STEAL_MAX is None:
        return None
    return {'*'} if not kept else out


for n, d0 in enumerate(sys.argv[1:]):
    left_out = read_times(d0)
    if left_out:
        print('%s: %s rounds left out (STEAL_MAX=%s)' % (d0, 'all' if '*' in left_out else len(left_out), STEAL_MAX))
    if os.path.exists(d0 + '/ab-rows.jsonl'):
        for line in open(d0 + '/ab-rows.jsonl'):
            r, arm, rest = line.split(' ', 2)
            if left_out and ('*' in left_out or r in left_out):
                continue
            d = json.loads(rest)
            test = 'pp%d' % d['n_prompt'] if d['n_prompt'] else 'tg%d' % d['n_gen']
            ts = d['samples_ts'][:FIRST_REPS]
            add((n, int(r)), arm, test, st.median(ts))
            fastest[(test, arm)][(n, int(r))] = max(ts)
            if len(ts) > 1:
                rep_cv[(test, arm)].append(st.stdev(ts) / st.mean(ts))
    else:
        hdr = open(d0 + '/ab-header.csv').read().strip().split(',')
        for line in open(d0 + '/ab-rows.txt'):
            r, arm, rest = line.split(' ', 2)
            d = dict(zip(hdr, next(csv.reader(io.StringIO(rest)))))
            test = 'pp%s' % d['n_prompt'] if d['n_prompt'] != '0' else 'tg%s' % d['n_gen']
            add((n, int(r)), arm, test, float(d['avg_ts']))


def to_base(per_round, test, stat):
    """Per arm: the median over rounds of its t/s over the BASE process's of the same round, with a bootstrap 95%
    interval."""
    base = per_round[(test, BASE)]
    ratios = {}  # arm -> its ratio to the BASE process of each round both have
    for arm in arms:
        v = per_round[(test, arm)]
        ratios[arm] = [v[r] / base[r] - 1 for r in sorted(v) if r in base]
    for arm in arms:
        if not ratios[arm]:
            continue
        boots = sorted(st.median(random.choices(ratios[arm], k=len(ratios[arm]))) for _ in range(4000))
        print('%s %-8s %-7s %8.1f t/s  vs %s %+6.2f%% [%+.2f, %+.2f] (n=%d)' % (
            test, arm, stat, st.median(per_round[(test, arm)].values()), BASE,
            100 * st.median(ratios[arm]), 100 * boots[100], 100 * boots[3899], len(ratios[arm])))
    return ratios


random.seed(1)
for test in sorted({t for t, _ in rows}):
    ratios = to_base(rows, test, 'median')
    for arm in arms:
        v = list(rows[(test, arm)].values())
        if len(v) < 2:
            continue
        cv = rep_cv.get((test, arm))
        print('%s %-8s spread: repetitions %s, processes %.2f%%, ratios to %s %.2f%% (SD)' % (
            test, arm, '%.2f%%' % (100 * st.median(cv)) if cv else '-', 100 * st.stdev(v) / st.mean(v), BASE,
            100 * st.stdev(ratios[arm]) if arm != BASE and len(ratios[arm]) > 1 else 0.0))
    if fastest.get((test, BASE)):
        to_base(fastest, test, 'fastest')

for arm in arms:
    if machine.get(arm):
        users = [u for u, _ in machine[arm]]
        steals = [s for _, s in machine[arm] if s is not None]
        stolen = 'stolen from in %d of %d processes, steal ticks median %g, max %d' % (
            sum(s > 0 for s in steals), len(steals), st.median(steals), max(steals)) if steals else 'no steal column'
        print('%-8s machine: user seconds median %.3f; %s' % (arm, st.median(users), stolen))
