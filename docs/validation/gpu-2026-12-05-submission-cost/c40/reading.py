#!/usr/bin/env python3
# Session 40's reading of c40/call-parts.sh's calls, fixed before any of their rounds ran (validation README,
# "Prepared for the next device calls (session 40)"): every folder named partsNN… is pooled round by round, both cards
# together, and `paused` (the layer loaded, forwarding only) is read against plain beside `env`. When the A/A control
# lies within ±0.25 points: a paused cost of at least 0.15% (a third of what `env` cost in the pool of c38/reading.py)
# says the forwarding is a share a cheaper layer has to cut; an interval for paused inside ±0.15 says it is not, and the
# cut goes to observing's own work; anything else is undecided.
# Usage, in this folder: python3 c40/reading.py
import importlib.util, os, sys

folder = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# c38's pooling of blackbox_ab.py's fastest-repetition lines, the same for these folders.
spec = importlib.util.spec_from_file_location('c38_reading', os.path.join(folder, 'c38', 'reading.py'))
c38 = importlib.util.module_from_spec(spec)
spec.loader.exec_module(c38)


def main():
    names = c38.folders(r'parts\d+[a-z]?')
    if not names:
        sys.exit('no parts… folder here yet')
    report(names, c38.pooled(names))


def report(names, fastest):
    """The reading above of `fastest`, c38's pool of the folders `names` (c41/aslr.py reads its own folders with it)."""
    for arm in ('paused', 'env', 'plain2'):
        print('%-7s %+.2f%% [%+.2f, %+.2f]  rounds %d  (%s)' % ((arm,) + fastest[arm] + (' '.join(names),)))
    aa, paused = fastest['plain2'], fastest['paused']
    if not (-0.25 <= aa[1] and aa[2] <= 0.25):
        verdict = 'not resolved (the A/A control leaves ±0.25)'
    elif paused[0] <= -0.15:
        verdict = 'forwarding is a share to cut (paused costs at least 0.15%)'
    elif -0.15 <= paused[1] and paused[2] <= 0.15:
        verdict = "forwarding is not the share: cut observing's own work"
    else:
        verdict = 'undecided'
    print('verdict:', verdict)


if __name__ == '__main__':
    main()
