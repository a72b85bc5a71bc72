#!/usr/bin/env python3
"""Train-sim matrix of 2026-12-03 (second run): median iteration / LB1 (min-max) per model, ratio, policy and
FERRY_PARTITION_MS, and matrix.png. Usage: summary.py matrix-*.json"""
import collections
import json
import statistics
import sys

d=collections.defaultdict(list)
for f in sys.argv[1:]:
    for r in json.load(open(f))['runs']:
        if 'error' in r: print('ERR', r.get('error')); continue
        e=r['env']; pol=e['FERRY_SCHEDULING_POLICY']; ms=e['FERRY_PARTITION_MS'] if pol!='p3' else '-'
        w=r['workers'][0]
        ratio={'vgg16':{0.33:0.5,0.66:1,1.32:2},'resnet50':{0.46:0.5,0.92:1,1.84:2},'bert_base':{0.855:0.5,1.71:1,3.42:2}}[r['model']][r['compute_scale']]
        d[(r['model'],ratio,pol,ms)].append((statistics.median(w['iterations_ms'])/w['lb']['lb1_ms'], r['cpu']['busiest_core_pct'], statistics.median(w['iterations_ms'])))
cols=[('credit','2'),('credit','0'),('p3','-'),('mercury','2'),('mercury','0'),('fifo','2'),('fifo','0')]
print('| model | ratio | '+' | '.join('%s ms=%s'%c for c in cols)+' | busiest core (default) |')
for m in ('vgg16','resnet50','bert_base'):
  for ratio in (0.5,1,2):
    row=[]
    for c in cols:
        v=[a for a,b,t in d[(m,ratio)+c]]
        row.append('%.3f (%.3f-%.3f)'%(statistics.median(v),min(v),max(v)) if v else '-')
    cpu=[b for a,b,t in d[(m,ratio,'credit','2')]]
    print('| %s | %s | %s | %d-%d%% |'%(m,ratio,' | '.join(row),min(cpu),max(cpu)))
for m in ('vgg16',):
    for ratio in (0.5,1):
        for ms in ('2','0'):
            c=statistics.median([t for a,b,t in d[(m,ratio,'credit',ms)]]); f=statistics.median([t for a,b,t in d[(m,ratio,'fifo',ms)]])
            print('fifo/credit', m, ratio, 'ms', ms, '%.3f'%(f/c))

# The plot: one panel per model, iteration / LB1 against the ratio for the columns above.
if __name__ == "__main__" and len(sys.argv) > 1:
    import os
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(15, 4), sharey=True)
    labels = {('credit', '2'): 'default (credit, FERRY_PARTITION_MS=2)', ('credit', '0'): 'before (credit, 1 MiB)',
              ('p3', '-'): 'p3', ('mercury', '2'): 'mercury', ('fifo', '2'): 'fifo'}
    for ax, m in zip(axes, ('vgg16', 'resnet50', 'bert_base')):
        for c, label in labels.items():
            xs, med, lo, hi = [], [], [], []
            for ratio in (0.5, 1, 2):
                v = [a for a, b, t in d[(m, ratio) + c]]
                if v:
                    xs.append(ratio); med.append(statistics.median(v))
                    lo.append(med[-1] - min(v)); hi.append(max(v) - med[-1])
            ax.errorbar(xs, med, yerr=[lo, hi], marker='o', capsize=3, label=label)
        ax.axhline(1.10, ls='--', c='gray', lw=0.8)
        ax.set_xscale('log', base=2); ax.set_xticks([0.5, 1, 2]); ax.set_xticklabels(['0.5', '1', '2'])
        ax.set_title(m); ax.set_xlabel('compute / communication')
    axes[0].set_ylabel('iteration / LB1 (median, min-max)')
    axes[-1].legend(fontsize=8)
    fig.suptitle('2 workers x 2 servers, 1 Gbit/s links, 2026-12-03 (dashed: the 1.10 goal)')
    fig.tight_layout()
    fig.savefig(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'matrix.png'), dpi=110)
