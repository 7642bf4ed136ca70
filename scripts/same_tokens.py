"""Two runs, the same prompts: are the outputs the same? For every (dataset, prompt, method) in both runs, the
shorter output must be a prefix of the longer (runs may ask for different lengths); prints the count per method and
the first difference. Greedy runs only (sampled outputs are draws). Also each run's ms/token ratio of two methods on
those prompts (median of the per-prompt ratios), so a speed change shows beside the outputs.
Run from the repository root, e.g. python scripts/same_tokens.py results/bench-amd512-native RUN caddtree ar"""
import statistics
import sys

from caddtree.bench import load_records

old_run, new_run, a, b = sys.argv[1:5]


def by_key(run):
    return {(r["dataset"], str(r["prompt_id"]), r["method"]): r for r in load_records(run)
            if "tokens" in r and not r.get("error")}


def agree(x: list[int], y: list[int]) -> bool:
    return x[:len(y)] == y[:len(x)]


old, new = by_key(old_run), by_key(new_run)
shared = sorted(set(old) & set(new))
for method in sorted({k[2] for k in shared}):
    keys = [k for k in shared if k[2] == method]
    same = [k for k in keys if agree(old[k]["tokens"], new[k]["tokens"])]
    print(f"{method}: {len(same)}/{len(keys)} outputs the same (prefix of the shorter)")
    for k in keys:
        if k not in same:
            x, y = old[k]["tokens"], new[k]["tokens"]
            i = next(i for i, (p, q) in enumerate(zip(x, y)) if p != q)
            print(f"  {k[0]} #{k[1]}: first difference at token {i}")
for name, recs in (("old", old), ("new", new)):
    ratios = [recs[(d, p, a)]["ms_per_token"] / recs[(d, p, b)]["ms_per_token"]
              for (d, p, m) in shared if m == a and (d, p, b) in shared]
    if ratios:
        print(f"{name}: {a} / {b} ms/token, median of {len(ratios)} per-prompt ratios: {statistics.median(ratios):.3f}")
