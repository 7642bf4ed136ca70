"""This run has no `ar`: compare every output with plain decoding's tokens for the same prompts and settings in
results/bench-t0-256-n20, and print the per-prompt ms/token ratios per set (`caddtree.bench.paired_ratio`).
Run from the repository root: python results/measured-cd/exact.py"""
from caddtree.bench import identical_to_plain, load_records, paired_ratio

recs = [r for r in load_records("results/measured-cd") if "ms_per_token" in r]
same = identical_to_plain(recs, "results/bench-t0-256-n20")
print(f"outputs identical to plain decoding (results/bench-t0-256-n20): {same}/{len(recs)}\n")
print("| dataset | caddtree / caddtree@profiledcd [90% CI] | faster | caddtree / ddtree:5 [90% CI] | faster | "
      "caddtree@profiledcd / ddtree:5 [90% CI] | faster |")
print("|---|---:|---:|---:|---:|---:|---:|")
for ds in dict.fromkeys(r["dataset"] for r in recs):
    cells = []
    for a, b in (("caddtree", "caddtree@profiledcd"), ("caddtree", "ddtree:5"), ("caddtree@profiledcd", "ddtree:5")):
        p = paired_ratio(recs, ds, a, b)
        lo, hi = p["paired_ci"] or (float("nan"), float("nan"))
        cells += [f"{p['paired_ratio']:.3f} [{lo:.2f}, {hi:.2f}]", f"{p['paired_faster']}/{p['paired_n']}"]
    print(f"| {ds} | " + " | ".join(cells) + " |")
