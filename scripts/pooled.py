"""One run, two methods, over all its prompts at once: the per-prompt ms/token ratio A / B (median with its 90%
bootstrap interval, geometric mean, prompts where A was faster; `caddtree.bench.paired_ratio` on every prompt
pooled), each method's pooled ms/token (all decode time over all tokens) and its mean round: draft, tree build,
verify and the rest (acceptance, compaction) in ms, nodes, τ. Prompts need both methods' records.
Run from the repository root, e.g. python scripts/pooled.py results/bench-amd512-shipped caddtree ddtree:5"""
import sys

import numpy as np

from caddtree.bench import load_records, paired_ratio

run, a, b = sys.argv[1], sys.argv[2], sys.argv[3]
recs = [r for r in load_records(run) if "ms_per_token" in r and not r.get("error") and r["method"] in (a, b)]
both = {}
for r in recs:
    both.setdefault((r["dataset"], str(r["prompt_id"])), {})[r["method"]] = r
pairs = [v for v in both.values() if a in v and b in v]
pooled = [{**v[m], "dataset": "all", "prompt_id": f"{v[m]['dataset']}/{v[m]['prompt_id']}"} for v in pairs for m in (a, b)]
p = paired_ratio(pooled, "all", a, b)
ratios = np.array([v[a]["ms_per_token"] / v[b]["ms_per_token"] for v in pairs])
ci = "" if p["paired_ci"] is None else f" [{p['paired_ci'][0]:.3f}, {p['paired_ci'][1]:.3f}]"
print(f"{run}: {a} / {b} over {len(pairs)} prompts: per-prompt ratio median {p['paired_ratio']:.3f}{ci}, "
      f"geometric mean {np.exp(np.log(ratios).mean()):.3f}, {a} faster on {p['paired_faster']}")
print("| method | pooled ms/token | rounds | draft ms | build ms | verify ms | rest ms | round ms | nodes | τ |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for m in (a, b):
    rs = [v[m] for v in pairs]
    rounds, tokens, decode = (sum(r[k] for r in rs) for k in ("rounds", "new_tokens", "decode_ms"))
    per = {k: sum(r[k] for r in rs) / rounds for k in ("draft_ms", "build_ms", "verify_ms")}
    nodes = sum(sum(r["tree_sizes"]) for r in rs) / rounds
    print(f"| {m} | {decode / tokens:.2f} | {rounds} | {per['draft_ms']:.2f} | {per['build_ms']:.2f} | "
          f"{per['verify_ms']:.2f} | {decode / rounds - sum(per.values()):.2f} | "
          f"{decode / rounds:.2f} | {nodes:.2f} | {tokens / rounds:.3f} |")
