"""Replay the CaDDTree runs of part 1 of results/bench-amd-headline's process order (its first K prompts per set:
math500, aime25, mbpp, mt_bench in round-robin order, after the same 4-token warm-up), printing per prompt the rounds,
the rounds where the gate ran stage 2, and τ.

    python results/gate-reset/replay.py K COST_PROFILE.json [fresh]

Without `fresh`, one decoder serves every prompt, as in `caddtree bench` (at 78c5c9f its gate kept its per-band gains
from one prompt to the next); with `fresh`, a new decoder per prompt. Only CaDDTree runs here, not the fixed budgets
between, so the prompt-lookup calibration the drafters share evolves a little differently from the bench's.
"""
import sys

import torch

from caddtree.cli import load_drafter_spec
from caddtree.datasets import load_prompts
from caddtree.engine import Decoder
from caddtree.profile import ensure_cost_model
from caddtree.target import load_target

k, prof = int(sys.argv[1]), sys.argv[2]
fresh = len(sys.argv) > 3 and sys.argv[3] == "fresh"
torch.set_num_threads(1)
target = load_target("smollm2-135m-instruct")
drafter = load_drafter_spec("dflash+lookup", target)
cm = ensure_cost_model(target, drafter, path=prof)
names = "math500,gsm8k,aime25,humaneval,mbpp,livecodebench,mt_bench,alpaca".split(",")
prompts = {d: load_prompts(d, k) for d in names}
order = [(d, prompts[d][i]) for i in range(k) for d in names]
part1 = [x for j, x in enumerate(order) if j % 2 == 0]
dec = Decoder(target, drafter, "caddtree", cost_model=cm)
dec.generate(target.chat_ids(part1[0][1]["prompt"]), 4)
for d, item in part1:
    if fresh:
        dec = Decoder(target, drafter, "caddtree", cost_model=cm)
    res = dec.generate(target.chat_ids(item["prompt"]), 256)
    s2 = sum(bool(r.second_stage) for r in res.rounds)
    print(d, item["id"], "rounds", len(res.rounds), "s2", s2, "tau %.2f" % (len(res.tokens) / len(res.rounds)), flush=True)
