"""Two bench runs of an A/B, prompt by prompt: the runs ran at the same time, one per core, on the same prompts and
settings, into DIR/BASE and DIR/NEW. Per method: median ms/token of each run, the per-prompt ratio NEW / BASE (median,
90% bootstrap interval, prompts faster; `caddtree.bench.paired_ratio`), each run's speed-up over its own plain
decoding, NEW's speed-up over BASE's plain decoding, τ, mean tree size, whether the two runs produced the same tokens,
and whether each run's output equals its own plain decoding. Run from the repository root, e.g.
python results/ab_compare.py results/kernels-ab old panel > results/kernels-ab/compare.md"""
import json
import sys
from pathlib import Path

import numpy as np

from caddtree.bench import paired_ratio

here, base, new = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
runs = {}
for kind in (base, new):
    recs = [json.loads(x) for x in open(here / kind / "records.jsonl")]
    runs[kind] = [r for r in recs if "ms_per_token" in r and not r.get("error")]
both = [{**r, "method": f"{r['method']}@{kind}"} for kind, recs in runs.items() for r in recs]


def values(kind, ds, method, key):
    return [r[key] for r in runs[kind] if r["dataset"] == ds and r["method"] == method]


def median_ms(kind, ds, method):
    return float(np.median(values(kind, ds, method, "ms_per_token")))


def tokens(kind, ds, method):
    return {r["prompt_id"]: r["tokens"] for r in runs[kind] if r["dataset"] == ds and r["method"] == method}


def both_ways(fmt):
    return " → ".join(fmt(k) for k in (base, new))


print(f"| dataset | method | ms/token {base} | ms/token {new} | per prompt {new} / {base} "
      f"| speed-up vs own ar, {base} → {new} | {new} vs {base}'s ar | τ {base} → {new} | tree size {base} → {new} "
      f"| same tokens {base} = {new} | exact vs ar (both runs) |")
print("|---|---|" + "---:|" * 9)
for ds in dict.fromkeys(r["dataset"] for r in runs[new]):
    for m in dict.fromkeys(r["method"] for r in runs[new] if r["dataset"] == ds):
        if not values(base, ds, m, "ms_per_token"):
            continue
        p = paired_ratio(both, ds, f"{m}@{new}", f"{m}@{base}")
        ci = p["paired_ci"]
        cell = (f"{p['paired_ratio']:.3f} [{ci[0]:.2f}, {ci[1]:.2f}] ({p['paired_faster']}/{p['paired_n']} faster)"
                if ci else f"{p['paired_ratio']:.3f} (n {p['paired_n']})")
        own = both_ways(lambda k: f"{median_ms(k, ds, 'ar') / median_ms(k, ds, m):.2f}×")
        cross = median_ms(base, ds, "ar") / median_ms(new, ds, m)
        tau = both_ways(lambda k: f"{np.median(values(k, ds, m, 'tau')):.2f}")
        size = both_ways(lambda k: f"{np.mean(values(k, ds, m, 'tree_size_mean')):.1f}")
        t_base, t_new = tokens(base, ds, m), tokens(new, ds, m)
        same = sum(t_base[i] == t_new[i] for i in t_new if i in t_base)
        ours = [r for k in runs for r in runs[k] if r["dataset"] == ds and r["method"] == m]
        exact = sum(bool(r["match_ar"]) for r in ours)
        print(f"| {ds} | {m} | {median_ms(base, ds, m):.1f} | {median_ms(new, ds, m):.1f} | {cell} | {own} | "
              f"{cross:.2f}× | {tau} | {size} | {same}/{len(t_new)} | {exact}/{len(ours)} |")
