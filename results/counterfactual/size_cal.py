"""Φ calibrated by tree size, replayed on the counterfactual rounds (no clock): per prefix size n, the ratio of
accepted nodes to Φ_n over the training prompts' rounds (DFlash + lookup stage), applied to Φ_n of every round of the
benchmark prompts; CaDDTree's rule (no gate, DFlash every round) with and without it, priced against fixed budgets.
Usage (repository root): python results/counterfactual/size_cal.py COST_PROFILE.json"""
import gzip, json, sys
import numpy as np
sys.path.insert(0, '.')
from caddtree.costmodel import load_cost_model
cm = load_cost_model(sys.argv[1])
ps = [json.loads(l) for l in gzip.open('results/counterfactual/rounds.jsonl.gz', 'rt')]
N = 24
def costs(r, stage):
    d = cm.draft_ms(r["ctx"]) if stage == "full" else cm.cheap_draft_ms(r["ctx"])
    return d + cm.overhead_ms(r["ctx"]) + cm.verify_curve(r["ctx"])[:N + 1]
def arr(r, key):
    a = np.array(r[key], dtype=np.float64)[:N + 1]
    return np.concatenate((a, np.full(N + 1 - len(a), a[-1])))
def phi(r, stage):
    d = np.exp(np.array(r["lw_" + stage], dtype=np.float64)[:N])
    return np.concatenate(([0.0], np.cumsum(d), np.full(N - len(d), np.sum(d))))[:N + 1]
stage = "full"
train = [p for p in ps if p['set'].startswith('train')]
test = [p for p in ps if not p['set'].startswith('train')]
A = sum(arr(r, "acc_" + stage) for p in train for r in p['rounds'])
F = sum(phi(r, stage) for p in train for r in p['rounds'])
c = np.where(F > 0, A / np.maximum(F, 1e-9), 1.0)
print('acc/Φ by n (train):', ' '.join('%d:%.2f' % (n, c[n]) for n in range(1, 16)))
def rule_phi(r, cal):
    f = phi(r, stage) * (c if cal else 1.0)
    th = (1 + f) / costs(r, stage)
    n = 1 + int(np.argmax(th[1:]))
    return 0 if th[0] >= th[n] else n
def score(p, pick):
    ms = tok = 0.0
    for r in p['rounds']:
        n = min(pick(r), len(r["lw_" + stage]))
        ms += costs(r, stage)[n]; tok += 1 + arr(r, "acc_" + stage)[n]
    return ms / tok
sets = sorted({p['set'] for p in test})
rows = {'shipped': lambda r: rule_phi(r, False), 'size-cal': lambda r: rule_phi(r, True), 'B5': lambda r: 5, 'B4': lambda r: 4, 'B8': lambda r: 8}
res = {k: {s: [] for s in sets} for k in rows}
for p in test:
    b5 = score(p, rows['B5'])
    for k, f in rows.items():
        res[k][p['set']].append(score(p, f) / b5)
print('geomean of ms/token / B5, no gate, DFlash every round')
for k in rows:
    allv = [v for s in sets for v in res[k][s]]
    print('%-9s' % k, ' '.join('%s %.3f' % (s[:5], np.exp(np.mean(np.log(res[k][s])))) for s in sets), ' all %.3f' % np.exp(np.mean(np.log(allv))))
