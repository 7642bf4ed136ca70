"""One run's records priced by a cost model instead of the clock (`caddtree.bench.priced_ms_per_token`: each round
at the profile's C_d, or the first stage's where the draft gate skipped the costly one, overhead and C_v(n; ℓ), ℓ
rebuilt from the accepted tokens). No timing noise: what the policy chose, priced as CaDDTree itself prices it.
`caddtree bench` writes the same prices in its summary (the "priced" columns); this script adds the per-prompt
ratio CaDDTree / B=5 and takes any profile.

    python scripts/predicted.py RUN_DIR [COST_PROFILE.json]   (default: RUN_DIR/cost_model.json)

Prints per dataset the median over prompts of the predicted ms/token per method, CaDDTree / each fixed budget by
medians, and the per-prompt ratio CaDDTree / B=5 over all prompts.
"""
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from caddtree.bench import load_records, priced_ms_per_token
from caddtree.costfile import load_cost_model

run = Path(sys.argv[1])
cm = load_cost_model(sys.argv[2] if len(sys.argv) > 2 else run / "cost_model.json")

recs = [r for r in load_records(run) if "ms_per_token" in r and not r.get("error") and r.get("tree_sizes")]
table = defaultdict(dict)  # (dataset, prompt) -> method -> predicted ms/token
for r in recs:
    table[(r["dataset"], r["prompt_id"])][r["method"]] = priced_ms_per_token(r, cm)
methods = sorted({m for v in table.values() for m in v}, key=lambda m: (m != "ar", m != "caddtree", m))
fixed = [m for m in methods if m.startswith("ddtree:")]
print(f"{run}: predicted ms/token (median over prompts), profile of {cm.provenance.get('date', '?')}")
print("| dataset | " + " | ".join(methods) + " | CaDDTree / oracle |")
print("|---|" + "---:|" * (len(methods) + 1))
for ds in dict.fromkeys(d for d, _ in table):
    rows = [v for (d, _), v in table.items() if d == ds and all(m in v for m in methods)]
    med = {m: float(np.median([v[m] for v in rows])) for m in methods}
    oracle = min(fixed, key=lambda m: med[m]) if fixed else None
    ratio = f"{med['caddtree'] / med[oracle]:.3f} ({oracle})" if oracle and "caddtree" in med else "–"
    print(f"| {ds} | " + " | ".join(f"{med[m]:.1f}" for m in methods) + f" | {ratio} |")
if "caddtree" in methods and "ddtree:5" in methods:
    q = np.array([v["caddtree"] / v["ddtree:5"] for v in table.values() if "caddtree" in v and "ddtree:5" in v])
    print(f"CaDDTree / B=5 per prompt over {len(q)} prompts: median {np.median(q):.3f}, geometric mean "
          f"{np.exp(np.log(q).mean()):.3f}, CaDDTree cheaper on {int((q < 1).sum())}")
