"""This run has no `ar`: compare every output with plain decoding's tokens for the same prompts and settings in
results/bench-t0-256-n20, and print how far the two runs of each (prompt, method) were apart.
Run from the repository root: python results/bench-t0-256-n20r/exact.py"""
import numpy as np

from caddtree.bench import identical_to_plain, load_records

recs = [r for r in load_records("results/bench-t0-256-n20r") if "ms_per_token" in r]
same = identical_to_plain(recs, "results/bench-t0-256-n20")
print(f"outputs identical to plain decoding (results/bench-t0-256-n20): {same}/{len(recs)} (each record keeps the "
      f"tokens of its faster run)")
spread = np.array([max(r["ms_per_token_runs"]) / min(r["ms_per_token_runs"]) - 1 for r in recs])
print(f"slower run over the faster one, per (prompt, method): median {100 * np.median(spread):.1f}%, "
      f"90th percentile {100 * np.percentile(spread, 90):.1f}%, max {100 * spread.max():.1f}%")
