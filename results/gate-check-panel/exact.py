"""This run has no `ar`: compare every output with plain decoding's tokens for the same prompts and settings in
results/bench-t0-256-panel. Also the per-prompt ms/token ratios of this run (`caddtree.bench.paired_ratio`).
Run from the repository root: python results/gate-check-panel/exact.py"""
import glob
import json

from caddtree.bench import paired_ratio

recs = [json.loads(x) for f in sorted(glob.glob("results/gate-check-panel/records*.jsonl")) for x in open(f)]
plain = {(r["dataset"], r["prompt_id"]): r["tokens"] for f in glob.glob("results/bench-t0-256-panel/records*.jsonl")
         for r in map(json.loads, open(f)) if r["method"] == "ar" and r["config"] == recs[0]["config"]}
same = sum(r["tokens"] == plain[(r["dataset"], r["prompt_id"])] for r in recs)
print(f"outputs identical to plain decoding (results/bench-t0-256-panel): {same}/{len(recs)}\n")
print("| dataset | method / other | per-prompt ms/token ratio [90% CI] | method faster |")
print("|---|---|---:|---:|")
for ds in ("gsm8k", "humaneval"):
    for a, b in (("caddtree", "ddtree:8"), ("caddtree@nogate", "ddtree:8"), ("caddtree@nogate", "caddtree")):
        p = paired_ratio(recs, ds, a, b)
        lo, hi = p["paired_ci"]
        print(f"| {ds} | {a} / {b} | {p['paired_ratio']:.3f} [{lo:.2f}, {hi:.2f}] | {p['paired_faster']}/{p['paired_n']} |")
