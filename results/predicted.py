"""One run's records priced by a cost model instead of the clock: per prompt, the predicted decode ms/token of each
method from its recorded rounds (tree size and accepted tokens per round, the context length rebuilt from them) and
the profile's C_d, overhead and C_v(n; ℓ). No timing noise: what the policy chose, priced as CaDDTree itself prices
it. For a gated two-stage drafter the record holds only how many rounds ran the costly stage, so those rounds are
priced at C_d of the mean context and the others at the first stage's C_d.

    python results/predicted.py RUN_DIR [COST_PROFILE.json]   (default: RUN_DIR/cost_model.json)

Prints per dataset the median over prompts of the predicted ms/token per method, CaDDTree / each fixed budget by
medians, and the per-prompt ratio CaDDTree / B=5 over all prompts.
"""
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from caddtree.bench import load_records
from caddtree.costmodel import load_cost_model

run = Path(sys.argv[1])
cm = load_cost_model(sys.argv[2] if len(sys.argv) > 2 else run / "cost_model.json")


def predicted_ms_per_token(r: dict) -> float:
    ctx, total, ctxs = r["prompt_len"] - 1, 0.0, []
    for n, a in zip(r["tree_sizes"], r["accepted"]):
        ctxs.append(ctx)
        total += cm.verify_ms(n, ctx) + (0.0 if r["method"] == "ar" else cm.overhead_ms(ctx))
        ctx += a + 1
    if r["method"] != "ar":
        mean_ctx = float(np.mean(ctxs))
        full = r["rounds"] if r.get("second_stage_rounds") is None else r["second_stage_rounds"]
        total += full * cm.draft_ms(mean_ctx) + (r["rounds"] - full) * cm.cheap_draft_ms(mean_ctx)
    return total / r["new_tokens"]


recs = [r for r in load_records(run) if "ms_per_token" in r and not r.get("error") and r.get("tree_sizes")]
table = defaultdict(dict)  # (dataset, prompt) -> method -> predicted ms/token
for r in recs:
    table[(r["dataset"], r["prompt_id"])][r["method"]] = predicted_ms_per_token(r)
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
