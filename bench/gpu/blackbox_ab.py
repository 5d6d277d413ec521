#!/usr/bin/env python3
# Summarises bench/gpu/blackbox_h200.sh's and blackbox_cost.sh's cost runs: per test and arm, the median over rounds of the arm's t/s over the
# plain run's of the same round, with a bootstrap 95% interval of that median. Usage: blackbox_ab.py OUT_DIR
import statistics as st, collections, csv, io, random, sys
d0=sys.argv[1]
rows=collections.defaultdict(dict)
hdr=open(d0+'/ab-header.csv').read().strip().split(',')
for line in open(d0+'/ab-rows.txt'):
    r,arm,rest=line.split(' ',2)
    f=next(csv.reader(io.StringIO(rest)))
    d=dict(zip(hdr,f))
    test='pp%s'%d['n_prompt'] if d['n_prompt']!='0' else 'tg%s'%d['n_gen']
    rows[(test,arm)][int(r)]=float(d['avg_ts'])
random.seed(1)
tests=sorted({t for t,_ in rows})
arms=[]
for line in open(d0+'/ab-rows.txt'):
    a=line.split(' ',2)[1]
    if a not in arms: arms.append(a)
for test in tests:
    base=rows[(test,'plain')]
    for arm in arms:
        v=rows[(test,arm)]
        rs=sorted(r for r in v if r in base)
        ratios=[v[r]/base[r]-1 for r in rs]
        boots=sorted(st.median(random.choices(ratios,k=len(ratios))) for _ in range(4000))
        print('%s %-8s median %8.1f t/s  vs plain %+6.2f%% [%+.2f, %+.2f] (n=%d)'%(test,arm,st.median(v.values()),100*st.median(ratios),100*boots[100],100*boots[3899],len(ratios)))
