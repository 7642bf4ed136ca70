"""This run has no `ar`: compare every output with plain decoding's tokens for the same prompts and settings in
results/bench-t0-256-n20, and print the per-prompt ratio phase 5 / phase 4 per dataset.
Run from the repository root: python results/bench-phase5-check/exact.py"""
import numpy as np

from caddtree.bench import identical_to_plain, load_records

recs = [r for r in load_records("results/bench-phase5-check") if "ms_per_token" in r]
same = identical_to_plain(recs, "results/bench-t0-256-n20")
print(f"outputs identical to plain decoding (results/bench-t0-256-n20): {same}/{len(recs)}")
by = {(r["dataset"], r["prompt_id"], r["method"]): r for r in recs}
ratios = []
for ds in dict.fromkeys(r["dataset"] for r in recs):
    pids = sorted({p for d, p, m in by if d == ds and (d, p, "caddtree") in by and (d, p, "mix-caddtree") in by})
    q = np.array([by[ds, p, "caddtree"]["ms_per_token"] / by[ds, p, "mix-caddtree"]["ms_per_token"] for p in pids])
    tau5 = np.mean([by[ds, p, "caddtree"]["tau"] for p in pids])
    tau4 = np.mean([by[ds, p, "mix-caddtree"]["tau"] for p in pids])
    ratios += list(q)
    print(f"{ds}: {len(pids)} prompts, ms/token phase 5 / phase 4 per prompt: median {np.median(q):.3f}, "
          f"geometric mean {np.exp(np.log(q).mean()):.3f}, faster on {(q < 1).sum()}; tau {tau4:.2f} -> {tau5:.2f}")
q = np.array(ratios)
print(f"all: {len(q)} prompts, median {np.median(q):.3f}, geometric mean {np.exp(np.log(q).mean()):.3f}, "
      f"faster on {(q < 1).sum()}")
