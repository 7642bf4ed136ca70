"""The draft gate's evidence per band: each round runs stage 2 (the DFlash forward) whatever the gate decides, and
the realised gain θ2 - θ1 the gate would have observed is written out, one row per round.

    python results/gate-reset/gate_diag.py DATASET N OUT.json [COST_PROFILE.json]

A fresh decoder per prompt. Run at commit 78c5c9f (before the gate's fix) with OMP_NUM_THREADS=1
CADDTREE_CPU_KERNEL=panel, one process per core (taskset -c 0 / -c 1).
"""
import json
import sys

import torch

from caddtree.cli import load_drafter_spec
from caddtree.datasets import load_prompts
from caddtree.engine import Decoder
from caddtree.profile import ensure_cost_model
from caddtree.target import load_target

ds, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
torch.set_num_threads(1)
target = load_target("smollm2-135m-instruct")
drafter = load_drafter_spec("dflash+lookup", target)
cm = ensure_cost_model(target, drafter, path=(sys.argv[4] if len(sys.argv) > 4 else None))
rows = []
for item in load_prompts(ds, n):
    dec = Decoder(target, drafter, "caddtree", cost_model=cm)
    g = dec.gate
    orig_run, orig_obs = g.run_rest, g.observe
    would = []

    def run_rest(band):  # the gate decides (its skip counters move as usual), stage 2 runs anyway
        would.append(orig_run(band))
        return True

    def observe(band, t1, t2):
        rows.append({"prompt": item["id"], "band": band, "t1": t1, "t2": t2})
        orig_obs(band, t1, t2)

    g.run_rest, g.observe = run_rest, observe
    res = dec.generate(target.chat_ids(item["prompt"]), 256)
    print(item["id"], len(res.tokens), "rounds", len(res.rounds), "would skip", would.count(False), flush=True)
json.dump(rows, open(out, "w"))
