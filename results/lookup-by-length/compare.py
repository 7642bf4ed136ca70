"""Prompt lookup calibrated per match length (new) against one calibration for all lengths (old): the same bench
(fixed 5-node tree and CaDDTree, mix drafter, 8 sets x 12 prompts) run once per version, each on its own core, and
every run priced by the cost model (`bench.priced_ms_per_token`, no clock; the two processes' clocks are shown
too, but each shared the machine with the other).

    python results/lookup-by-length/compare.py OLD_RUN_DIR NEW_RUN_DIR [COST_PROFILE.json]
"""
import sys
from collections import defaultdict

import numpy as np

from caddtree.bench import load_records, priced_ms_per_token
from caddtree.costmodel import load_cost_model

old_dir, new_dir = sys.argv[1], sys.argv[2]
cm = load_cost_model(sys.argv[3] if len(sys.argv) > 3 else "results/bench-amd-headline/cost_model.json")


def table(run):
    out = defaultdict(dict)  # (dataset, prompt) -> method -> (priced ms/token, clock ms/token, τ)
    for r in load_records(run):
        if r.get("tree_sizes"):
            out[(r["dataset"], r["prompt_id"])][r["method"]] = (priced_ms_per_token(r, cm), r["ms_per_token"], r["tau"])
    return out


old, new = table(old_dir), table(new_dir)
keys = [k for k in old if k in new and len(old[k]) == len(new[k]) == 2]
gm = lambda v: float(np.exp(np.mean(np.log(v))))  # noqa: E731
print("geometric means over each set's prompts (priced unless said); τ = tokens per round")
print("| dataset | n | B=5 new/old | CaDDTree new/old | CaDDTree/B=5 old | CaDDTree/B=5 new | τ B=5 old → new | "
      "τ CaDDTree old → new | CaDDTree new/old, clock |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for ds in list(dict.fromkeys(d for d, _ in keys)) + ["all"]:
    ks = [k for k in keys if ds in ("all", k[0])]
    f = lambda run, m, i=0: np.array([run[k][m][i] for k in ks])  # noqa: E731
    print(f"| {ds} | {len(ks)} | {gm(f(new, 'ddtree:5') / f(old, 'ddtree:5')):.3f} | "
          f"{gm(f(new, 'caddtree') / f(old, 'caddtree')):.3f} | {gm(f(old, 'caddtree') / f(old, 'ddtree:5')):.3f} | "
          f"{gm(f(new, 'caddtree') / f(new, 'ddtree:5')):.3f} | {f(old, 'ddtree:5', 2).mean():.2f} → "
          f"{f(new, 'ddtree:5', 2).mean():.2f} | {f(old, 'caddtree', 2).mean():.2f} → {f(new, 'caddtree', 2).mean():.2f} | "
          f"{gm(f(new, 'caddtree', 1) / f(old, 'caddtree', 1)):.3f} |")
