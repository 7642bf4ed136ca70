"""CaDDTree (gate) / B=5 per prompt, priced by the cost model, on each method's own trajectory (three runs) against
the counterfactual replay on another policy's rounds.

    python results/counterfactual/own-trajectory/compare.py
"""
import gzip, json, os, sys

import numpy as np

from caddtree.bench import load_records, priced_ms_per_token
from caddtree.costmodel import load_cost_model

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..", "..")
cm = load_cost_model(os.path.join(ROOT, "results/bench-amd-headline/cost_model.json"))
sys.argv = ["analyse", os.path.join(ROOT, "results/bench-amd-headline/cost_model.json")]
sys.path.insert(0, os.path.join(HERE, ".."))
import analyse as A  # noqa: E402


def priced(records, key=lambda r: (r["dataset"], str(r["prompt_id"]), r["method"])):
    return {key(r): priced_ms_per_token(r, cm) for r in records if r.get("tree_sizes")}


def replay(path):
    prompts = [json.loads(line) for line in gzip.open(path, "rt")]
    return {(p["set"], p["id"], m): A.run(p, rule)[0] for p in prompts
            for m, rule in (("caddtree", A.gated("deepest")), ("ddtree:5", A.fixed(5)))}


fresh = [json.loads(line) for line in open(os.path.join(HERE, "fresh_decoders.jsonl"))]
sources = {
    "own trajectories: the headline run (5 methods share a drafter)":
        priced(load_records(os.path.join(ROOT, "results/bench-amd-gatereset"))),
    "own trajectories: caddtree bench, B=5 and CaDDTree only": priced(load_records(os.path.join(HERE, "bench"))),
    "own trajectories: a fresh decoder and drafter per generation":
        priced(fresh, key=lambda r: (r["dataset"], r["id"], "ddtree:5" if r["method"] == "ddtree" else r["method"])),
    "replayed on CaDDTree-without-gate's rounds (rounds.jsonl.gz)": replay(os.path.join(HERE, "..", "rounds.jsonl.gz")),
    "replayed on B=5's rounds (rounds-b5-trajectory.jsonl.gz)":
        replay(os.path.join(HERE, "..", "rounds-b5-trajectory.jsonl.gz")),
}
print("CaDDTree (gate) / B=5, priced, geometric mean over the 12 prompts")
print("%-64s %10s %10s" % ("", "humaneval", "mbpp"))
for name, v in sources.items():
    row = []
    for ds in ("humaneval", "mbpp"):
        ids = sorted({k[1] for k in v if k[0] == ds and (ds, k[1], "caddtree") in v and (ds, k[1], "ddtree:5") in v})
        q = np.array([v[(ds, i, "caddtree")] / v[(ds, i, "ddtree:5")] for i in ids])
        row.append(f"{np.exp(np.log(q).mean()):.3f}" if len(q) else "–")
    print("%-64s %10s %10s" % (name, *row))

print("\nfresh decoders, CaDDTree (gate): rounds that skipped the DFlash forward, and the round after one that accepted "
      "nothing")
for ds in ("humaneval", "mbpp"):
    skipped, after, big = [], {}, []
    for r in fresh:
        if r["method"] != "caddtree" or r["dataset"] != ds:
            continue
        s2, acc = r["second_stage"], r["accepted"]
        skipped += [a for a, s in zip(acc, s2) if not s]
        big += [a for a, s, n in zip(acc, s2, r["tree_sizes"]) if not s and n >= 4]
        for i in range(1, len(acc)):
            if not s2[i - 1] and acc[i - 1] == 0:
                k = ("skipped" if not s2[i] else "DFlash", "nothing" if acc[i] == 0 else "accepted")
                after[k] = after.get(k, 0) + 1
    print(f"  {ds}: {len(skipped)} skipped rounds, {np.mean(np.array(skipped) == 0):.0%} accepted nothing "
          f"({len(big)} with a lookup tree of 4+ nodes, {sum(a == 0 for a in big)} of them nothing); next round: "
          + ", ".join(f"{a} and {b} {n}" for (a, b), n in sorted(after.items())))
