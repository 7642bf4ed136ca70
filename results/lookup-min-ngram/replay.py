"""Replay lookup-CaDDTree at temperature 0 on recorded greedy outputs, without the target.

At temperature 0 every lossless method commits the target's greedy continuation, and the prompt-lookup drafter's
proposal depends only on the committed tokens. So each round can be replayed exactly: propose, build the tree, cut
it with CaDDTree's rule and the measured cost model, accept the longest path that follows the recorded continuation.
Round times come from the cost model (C_d + overhead + C_v(n; ℓ)), so the output is predicted ms/token: a noise-free
way to compare drafter settings, not a measured speed.

Sources: `bench` = the `ar` records of results/bench-t0-256-full (its 10 prompts per set), `refs` = prompts 10-19 of
the greedy references that `caddtree eval-drafter --n 20` caches (not benchmark prompts).
Usage: python results/lookup-min-ngram/replay.py SOURCE DATASETS MIN_NGRAM [MIN_NGRAM ...]
"""
import functools
import glob
import json
import sys
from pathlib import Path

import torch

from caddtree.accept import accept_walk
from caddtree.budget import choose_tree_size
from caddtree.costmodel import load_cost_model
from caddtree.drafter import PromptLookupDrafter
from caddtree.target import cache_dir
from caddtree.tree import build_tree

RUN = Path("results/bench-t0-256-full")


@functools.cache
def _bench_source():
    """The target (for its chat template) and the headline run's records, read once for every dataset."""
    from caddtree.target import load_target
    return load_target(), [json.loads(line) for f in glob.glob(str(RUN / "records.part*.jsonl")) for line in open(f)]


def sequences(source: str, ds: str) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, greedy continuation) pairs."""
    if source == "refs":
        path = next(Path(cache_dir(), "eval_refs").glob(f"*_bench-{ds}_20_256_*.pt"))
        return [(t[:p].tolist(), t[p:].tolist()) for t, p, _ in torch.load(path, weights_only=False)[10:20]]
    from caddtree.datasets import load_prompts
    target, recs = _bench_source()
    prompts = {str(p["id"]): p["prompt"] for p in load_prompts(ds, 10)}
    return [(target.chat_ids(prompts[str(r["prompt_id"])]).tolist(), r["tokens"])
            for r in recs if r["dataset"] == ds and r["method"] == "ar"]


def replay(seqs, drafter: PromptLookupDrafter, cost) -> dict:
    rounds = tokens = 0
    ms = 0.0
    for prompt, cont in seqs:
        drafter.reset(None)
        seq, k = list(prompt), 0
        while k < len(cont):
            ctx, room = len(seq) - 1, len(cont) - k - 1
            log_probs = drafter.propose(torch.tensor(seq))
            n, path = 0, []
            if room > 0:
                tree = build_tree(log_probs[:room], cost.max_nodes)
                n = choose_tree_size(tree.log_weights, cost, ctx).n if len(tree) else 0
                tree = tree.prefix(n)
                # the target's choice after a node at depth d on the recorded path is cont[k + d] (d <= room)
                choices = torch.tensor([cont[k]] + [cont[k + d] for d in tree.depths.tolist()])
                path, _ = accept_walk(tree.tokens, tree.parents, choices)
            ms += cost.round_ms(n, ctx)
            new = cont[k:k + len(path) + 1]
            seq += new
            k, rounds = k + len(new), rounds + 1
        tokens += len(cont)
    return {"tau": tokens / rounds, "predicted_ms_per_token": ms / tokens}


def main() -> None:
    source, datasets, mins = sys.argv[1], sys.argv[2].split(","), [int(x) for x in sys.argv[3:]]
    cost = load_cost_model(RUN / "cost_model_PromptLookupDrafter.json")
    for ds in datasets:
        seqs = sequences(source, ds)
        for m in mins:
            r = replay(seqs, PromptLookupDrafter(49152, min_ngram=m), cost)
            print(json.dumps({"source": source, "dataset": ds, "min_ngram": m, "prompts": len(seqs),
                              **{k: round(v, 3) for k, v in r.items()}}), flush=True)


if __name__ == "__main__":
    main()
