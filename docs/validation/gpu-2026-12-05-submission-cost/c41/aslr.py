#!/usr/bin/env python3
# Session 41's reading of the calls with address randomisation on (`ASLR=1 bash c40/call-parts.sh aslrNN`: arms plain,
# paused, env, plain2), fixed before any of their rounds ran (validation README, "Prepared for the next device calls
# (session 41)"). Every folder named aslrNN… is pooled round by round: what a user pays is read by c38's criterion
# (the A/A control within ±0.25 points, `env`'s interval wholly under a 0.5% cost, neither card's point past 0.5%),
# and a paused layer by c40's rule. These rounds start a pool of their own: c38's folders ran with randomisation off.
# Usage, in this folder: python3 c41/aslr.py
import importlib.util, os, sys

folder = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def reading(name):
    spec = importlib.util.spec_from_file_location(name.replace('/', '_'), os.path.join(folder, name, 'reading.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PATTERN = r'aslr\d+[a-z]?'
c38 = reading('c38')
names = c38.folders(PATTERN)
if not names:
    sys.exit('no aslr… folder here yet')
reading('c40').report(names, c38.read(names))
