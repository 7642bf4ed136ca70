"""Counterfactual rounds: every round of a greedy generation, with the 32-node best-first trees of both draft stages
(prompt lookup alone; the DFlash + lookup mix) and, for each prefix size n = 0..32, how many nodes the greedy
output accepts (`accept.accepted_along`). Greedy acceptance depends only on the output text, so any tree-size rule
or draft gate can then be priced on these rounds by the cost model with no clock (`analyse.py`).

The trajectory is CaDDTree's without the gate (both stages every round, the shipped rule's tree verified; with
TRAJ_BUDGET=B the fixed B-node tree's instead), so the drafters' states are those of a real decode. One line per prompt, appended as it finishes; a rerun skips done ids.

    python results/counterfactual/collect.py SETS N OUT.jsonl COST_PROFILE.json [PART/PARTS]
    SETS: comma list of benchmark names (datasets.load_prompts) and/or train (the drafter's training prompts)
"""
import json, os, sys, time
from pathlib import Path

import numpy as np
import torch

import caddtree.engine as E
from caddtree.accept import accepted_along
from caddtree.budget import choose_tree_size
from caddtree.cli import load_drafter_spec
from caddtree.datasets import load_prompts
from caddtree.profile import ensure_cost_model
from caddtree.target import load_target
from caddtree.train import data_dir, train_prompts
from caddtree.tree import build_tree

sets, n, out, prof = sys.argv[1].split(","), int(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
part, parts = map(int, (sys.argv[5] if len(sys.argv) > 5 else "1/1").split("/"))
torch.set_num_threads(1)
target = load_target("smollm2-135m-instruct")
drafter = load_drafter_spec("dflash+lookup", target)
cm = ensure_cost_model(target, drafter, path=prof)
N = cm.max_nodes
TRAJ = int(os.environ.get("TRAJ_BUDGET", "0"))  # verify a fixed budget's tree instead (another trajectory)


class Recorder(E.Decoder):
    """CaDDTree, no gate; keeps both stages' full trees of every round."""
    def _draft_tree(self, tokens, feats, ctx, room, stats):
        t0 = time.perf_counter()
        cheap = build_tree(self.drafter.propose_cheap(tokens)[:room], N)
        lp = self.drafter.propose_rest(tokens, feats)
        stats.draft_ms = 1000 * (time.perf_counter() - t0)
        full = build_tree(lp[:room], N)
        choice = choose_tree_size(full.log_weights, self.cost_model, ctx)
        self.trees.append((cheap, full))
        stats.predicted_phi, stats.predicted_ms = choice.phi, choice.predicted_ms
        return full.prefix(TRAJ or choice.n), None


def accepted_by_size(tree, text):
    """[len(tree) + 1] accepted nodes of each best-first prefix 0..len(tree)."""
    return [0] + [accepted_along(tree.tokens[:k], tree.parents[:k], tree.depths[:k], text, final=True)
                  for k in range(1, len(tree) + 1)]


items = []
for s in sets:
    if s == "train":
        items += [{"set": "train:" + src, "id": f"train{i}", "prompt": p}
                  for i, (src, p) in enumerate(train_prompts(data_dir(None), seed=1)[:n])]
    else:
        items += [{"set": s, "id": str(it["id"]), "prompt": it["prompt"]} for it in load_prompts(s, n)]
items = items[part - 1::parts]
done = set()
if out.exists():
    done = {(r["set"], r["id"]) for r in map(json.loads, out.read_text().splitlines())}
dec = Recorder(target, drafter, "caddtree", cost_model=cm, gate=False)
for it in items:
    if (it["set"], it["id"]) in done:
        continue
    dec.trees = []
    res = dec.generate(target.chat_ids(it["prompt"]), 256)
    rounds, start = [], 0
    for r, (cheap, full) in zip(res.rounds, dec.trees):
        text = res.tokens[start:]
        rounds.append({"ctx": r.ctx, "start": start,
                       "lw_cheap": [round(x, 5) for x in cheap.log_weights.tolist()],
                       "acc_cheap": accepted_by_size(cheap, text),
                       "lw_full": [round(x, 5) for x in full.log_weights.tolist()],
                       "acc_full": accepted_by_size(full, text),
                       "depth_full": full.depths.tolist(), "chosen": r.tree_size, "accepted": r.accepted})
        start += r.emitted
    rec = {"set": it["set"], "id": it["id"], "tokens": res.tokens, "rounds": rounds}
    with out.open("a") as f:
        f.write(json.dumps(rec) + "\n")
    print(it["set"], it["id"], len(res.rounds), "rounds", "tau %.2f" % res.mean_accepted, flush=True)
