"""Panel kernel against the previous kernels, prompt by prompt: the two runs ran at the same time, one per core, on
the same prompts. Per method: median ms/token of each run, the per-prompt ratio panel / old (median, 90% bootstrap
interval, prompts faster; `caddtree.bench.paired_ratio`), each run's speed-up over its own plain decoding, and whether
the two runs produced the same tokens. Run from the repository root:
python results/kernels-ab/compare.py > results/kernels-ab/compare.md"""
import json
from pathlib import Path

import numpy as np

from caddtree.bench import paired_ratio

here = Path(__file__).parent
runs = {}
for kind in ("old", "panel"):
    recs = [json.loads(x) for x in open(here / kind / "records.jsonl")]
    runs[kind] = [r for r in recs if "ms_per_token" in r and not r.get("error")]
both = [{**r, "method": f"{r['method']}@{kind}"} for kind, recs in runs.items() for r in recs]


def median_ms(kind, ds, method):
    return float(np.median([r["ms_per_token"] for r in runs[kind] if r["dataset"] == ds and r["method"] == method]))


def tokens(kind, ds, method):
    return {r["prompt_id"]: r["tokens"] for r in runs[kind] if r["dataset"] == ds and r["method"] == method}


print("| dataset | method | ms/token old | ms/token panel | per prompt panel / old | speed-up vs ar, old → panel "
      "| τ old → panel | same tokens old = panel | exact vs ar (both runs) |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
for ds in dict.fromkeys(r["dataset"] for r in runs["panel"]):
    for m in dict.fromkeys(r["method"] for r in runs["panel"] if r["dataset"] == ds):
        p = paired_ratio(both, ds, f"{m}@panel", f"{m}@old")
        ci = p["paired_ci"]
        cell = (f"{p['paired_ratio']:.3f} [{ci[0]:.2f}, {ci[1]:.2f}] ({p['paired_faster']}/{p['paired_n']} faster)"
                if ci else f"{p['paired_ratio']:.3f} (n {p['paired_n']})")
        old, new = median_ms("old", ds, m), median_ms("panel", ds, m)
        sp = " → ".join(f"{median_ms(k, ds, 'ar') / median_ms(k, ds, m):.2f}×" for k in ("old", "panel"))
        tau = " → ".join(f"{np.median([r['tau'] for r in runs[k] if r['dataset'] == ds and r['method'] == m]):.2f}"
                         for k in ("old", "panel"))
        t_old, t_new = tokens("old", ds, m), tokens("panel", ds, m)
        same = sum(t_old[i] == t_new[i] for i in t_new if i in t_old)
        ours = [r for k in runs for r in runs[k] if r["dataset"] == ds and r["method"] == m]
        exact = sum(bool(r["match_ar"]) for r in ours)
        print(f"| {ds} | {m} | {old:.1f} | {new:.1f} | {cell} | {sp} | {tau} | {same}/{len(t_new)} | "
              f"{exact}/{len(ours)} |")
