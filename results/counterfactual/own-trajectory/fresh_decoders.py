"""CaDDTree (gate) and the fixed 5-node tree on HumanEval and MBPP × 12, each generation with a fresh decoder and a
fresh drafter (no calibration carried over), greedy, 256 tokens; records with every round's choices, priced by
`bench.priced_ms_per_token` (no clock).

    OMP_NUM_THREADS=1 CADDTREE_CPU_KERNEL=panel taskset -c 1 python results/counterfactual/own-trajectory/fresh_decoders.py OUT.jsonl
"""
import json, sys, torch
from caddtree.target import load_target
from caddtree.cli import load_drafter_spec
from caddtree.datasets import load_prompts
from caddtree.engine import Decoder
from caddtree.costmodel import load_cost_model
from caddtree.bench import priced_ms_per_token
torch.set_num_threads(1)
t = load_target("smollm2-135m-instruct")
cm = load_cost_model("results/bench-amd-headline/cost_model.json")
out = open(sys.argv[1], "a")
for ds in ["humaneval", "mbpp"]:
    for it in load_prompts(ds, 12):
        for m in ("ddtree", "caddtree"):
            d = load_drafter_spec("dflash+lookup", t)
            dec = Decoder(t, d, m, budget=5, cost_model=cm)
            res = dec.generate(t.chat_ids(it["prompt"]), 256)
            rec = {"dataset": ds, "id": str(it["id"]), "method": m, "prompt_len": res.prompt_len,
                   "tree_sizes": [r.tree_size for r in res.rounds], "accepted": [r.accepted for r in res.rounds],
                   "new_tokens": len(res.tokens), "tau": res.mean_accepted}
            if dec.gate is not None:
                rec["second_stage"] = [int(bool(r.second_stage)) for r in res.rounds]
            rec["priced"] = priced_ms_per_token(rec, cm)
            out.write(json.dumps(rec) + "\n"); out.flush()
            print(ds, it["id"], m, "%.1f τ%.2f" % (rec["priced"], rec["tau"]), flush=True)
