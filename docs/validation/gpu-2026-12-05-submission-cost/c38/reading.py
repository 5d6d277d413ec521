#!/usr/bin/env python3
# Session 38's reading of the decode goal, fixed before the rounds it will read (validation README, "Prepared for the
# next device calls (session 38)"), done by a program so that a later session applies it as written. Every folder of
# the process-level shape with this layer (session 35's `c35h`, `c35i`, and every `plNN…`/`hNN…` since) is pooled
# round by round, both cards together; each card's own pool is printed beside it. The goal is met when the pooled A/A
# control (`plain2`) lies within ±0.25 points, the pooled `env` interval's cost-side end is under 0.5%, and neither
# card's own pool puts its point estimate past 0.5%. The card of a folder is what its `gpu-first.txt` names.
# Usage, in this folder: python3 c38/reading.py
import os, re, subprocess, sys

here = os.path.dirname(os.path.abspath(__file__))
folder = os.path.dirname(here)
ab = os.path.join(folder, '..', '..', '..', 'bench', 'gpu', 'blackbox_ab.py')

LINE = r'tg16 (\w+) +fastest .* vs %s +([+-][\d.]+)%% \[([+-][\d.]+), ([+-][\d.]+)\] \(n=(\d+)\)'


def pooled(dirs, base='plain'):
    """{arm: (median, low, high, rounds)} of blackbox_ab.py's fastest-repetition lines over the folders, each arm
    against `base` round by round (blackbox_ab.py's BASE)."""
    out = subprocess.run([sys.executable, ab] + dirs, cwd=folder, capture_output=True, text=True, check=True,
                         env=dict(os.environ, BASE=base)).stdout
    line = re.compile(LINE % re.escape(base))
    return {m[1]: tuple(float(x) for x in m.groups()[1:4]) + (int(m[5]),) for m in map(line.match, out.splitlines())
            if m}


def show(label, r):
    e, a = r['env'], r['plain2']
    print('%-28s env %+.2f%% [%+.2f, %+.2f]  A/A %+.2f%% [%+.2f, %+.2f]  rounds %d' % (label, *e[:3], *a[:3], e[3]))


def folders(pattern):
    """The folders here whose whole name matches `pattern`, sorted."""
    return sorted(n for n in os.listdir(folder) if re.fullmatch(pattern, n) and os.path.isdir(os.path.join(folder, n)))


def main():
    read(folders(r'(pl\d+[a-z]?|h\d+[a-z]?|c35h|c35i)'))


def read(names):
    """The reading above over the folders `names`: each card's pool, both cards pooled, and the verdict; returns
    the pool of all of them (`pooled(names)`)."""
    cards = {}
    for n in names:
        first = open(os.path.join(folder, n, 'gpu-first.txt')).read()
        card = 'H200' if 'H200' in first else 'H100' if 'H100' in first else None
        if card is None:
            sys.exit('%s/gpu-first.txt names neither an H100 nor an H200: %r' % (n, first.strip()))
        cards.setdefault(card, []).append(n)
    per_card = {}
    for card, dirs in sorted(cards.items()):
        per_card[card] = pooled(dirs)
        show('%s (%s)' % (card, ' '.join(dirs)), per_card[card])
    every = pooled(names)
    show('both cards pooled', every)
    resolved = -0.25 <= every['plain2'][1] and every['plain2'][2] <= 0.25
    met = resolved and every['env'][1] > -0.5 and all(r['env'][0] > -0.5 for r in per_card.values())
    print('A/A control within ±0.25: %s; decode goal (cost at most 0.5%%, whole interval): %s' % (
        'yes' if resolved else 'no', 'met' if met else 'not shown'))
    return every


# c40/reading.py pools its own folders with `pooled` (imported, so the reading above runs only as a program).
if __name__ == '__main__':
    main()
