#!/usr/bin/env python3
# Session 41's reading of the follow-up calls (`ASLR=1 ARMS="plain preload bare paused plain2" bash
# c40/call-parts.sh splitNN`), fixed before any of their rounds ran (validation README, "Prepared for the next device
# calls (session 41)"); they are made only if c41/aslr.py finds that a paused layer costs at least 0.15%. Every
# folder named splitNN… is pooled round by round, both cards together. Each step of a paused layer is read against the
# step before it in the same rounds: `preload` against plain (a library loaded that the process never calls), `bare`
# against preload (the layer loaded and forwarding, none of its extensions enabled), `paused` against bare (the marker
# extension, VK_EXT_device_fault and capture statistics enabled on the device). With the A/A control within ±0.25
# points, a step whose interval lies wholly on the cost side with a point of at least 0.10% is a share to cut; one
# whose interval lies inside ±0.15 is not; anything else is undecided.
# Usage, in this folder: python3 c41/reading.py
import importlib.util, os, sys

folder = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
spec = importlib.util.spec_from_file_location('c38_reading', os.path.join(folder, 'c38', 'reading.py'))
c38 = importlib.util.module_from_spec(spec)
spec.loader.exec_module(c38)
names = c38.folders(r'split\d+[a-z]?')
if not names:
    sys.exit('no split… folder here yet')
STEPS = (('preload', 'plain', 'loading a library the process does not call'),
         ('bare', 'preload', "the layer's loading and forwarding"),
         ('paused', 'bare', "what the layer enables on its device"))
against = {base: c38.pooled(names, base) for _, base, _ in STEPS}
aa = against['plain']['plain2']
print('A/A     %+.2f%% [%+.2f, %+.2f]  rounds %d  (%s)' % (aa + (' '.join(names),)))
resolved = -0.25 <= aa[1] and aa[2] <= 0.25
for arm, base, what in STEPS:
    m, low, high, rounds = against[base][arm]
    if not resolved:
        verdict = 'not resolved (the A/A control leaves ±0.25)'
    elif high < 0 and m <= -0.10:
        verdict = 'a share to cut'
    elif -0.15 <= low and high <= 0.15:
        verdict = 'not a share'
    else:
        verdict = 'undecided'
    print('%-7s vs %-7s %+.2f%% [%+.2f, %+.2f]  rounds %d  %s: %s' % (arm, base, m, low, high, rounds, what, verdict))
