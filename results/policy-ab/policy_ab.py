"""CaDDTree's tree-size rule, and its draft gate, priced by the cost model (deterministic, no clock):
'ratio' = the shipped rule (per round, argmax over n of (1 + Φ_n) / (C_d + overhead + C_v(n))); 'global' = argmax of
(1 + Φ_n) - θ* C_v(n), θ* the generation's rate so far (tokens / predicted ms): the renewal-reward (Dinkelbach) form,
where the draft cost already paid does not enter the choice. GATE=0 runs the DFlash forward every round.

    GATE=1 python results/policy-ab/policy_ab.py ratio|global mbpp,humaneval,gsm8k 8 OUT.json COST_PROFILE.json

Writes per prompt the predicted ms/token (C_d or the first stage's C_d, overhead and C_v(n; ℓ) of each round, over
the tokens), τ, mean nodes and the rounds with the DFlash forward.
"""
import json, os, sys
import numpy as np, torch
import caddtree.engine as E
from caddtree.budget import BudgetChoice, choose_tree_size, _base_ms, _numpy
from caddtree.cli import load_drafter_spec
from caddtree.datasets import load_prompts
from caddtree.profile import ensure_cost_model
from caddtree.target import load_target

rule, names, n, out, prof = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3]), sys.argv[4], sys.argv[5]
torch.set_num_threads(1)
target = load_target("smollm2-135m-instruct")
drafter = load_drafter_spec("dflash+lookup", target)
cm = ensure_cost_model(target, drafter, path=prof)
state = {"tok": 0, "ms": 0.0, "last": None}

def choose_global(log_weights, cost, ctx, n_min=0, n_max=None, draft_ms=None):
    if state["ms"] <= 0:
        c = choose_tree_size(log_weights, cost, ctx, n_min, n_max, draft_ms)
    else:
        theta = state["tok"] / state["ms"]
        lw = _numpy(log_weights)
        cap = min(len(lw), cost.max_nodes, len(lw) if n_max is None else n_max)
        cv = cost.verify_curve(ctx)[:cap + 1]
        base = _base_ms(cost, ctx, draft_ms)
        phi = np.concatenate(([0.0], np.cumsum(np.exp(lw[:cap].astype(np.float64)))))
        k = int(np.argmax((1.0 + phi) - theta * cv))
        c = BudgetChoice(k, float(phi[k]), float(base + cv[k]), float(base + cv[0]))
    state["last"] = c
    return c

class NoStop:
    def __init__(self, *a, **k): pass
    def __call__(self, lw): return False

if rule == "global":
    E.choose_tree_size, E.TreeStop = choose_global, NoStop
rows = []
for ds in names:
    for item in load_prompts(ds, n):
        state.update(tok=0, ms=0.0, last=None)
        dec = E.Decoder(target, drafter, "caddtree", cost_model=cm, gate=os.environ.get("GATE", "1") == "1", calibrate_phi=os.environ.get("CAL", "0") == "1")
        def on_tokens(new):
            if state["last"] is not None:
                state["tok"] += len(new); state["ms"] += state["last"].predicted_ms
        res = dec.generate(target.chat_ids(item["prompt"]), 256, on_tokens=on_tokens)
        ms = 0.0
        for r in res.rounds:
            d = cm.cheap_draft_ms(r.ctx) if r.second_stage is False else cm.draft_ms(r.ctx)  # None: no gate
            ms += d + cm.overhead_ms(r.ctx) + cm.verify_ms(r.tree_size, r.ctx)
        rows.append({"dataset": ds, "id": item["id"], "tokens": res.tokens, "rounds": len(res.rounds),
                     "pred_ms_per_token": ms / len(res.tokens), "tau": len(res.tokens) / len(res.rounds),
                     "nodes": float(np.mean([r.tree_size for r in res.rounds])),
                     "s2": sum(bool(r.second_stage) for r in res.rounds)})
        print(ds, item["id"], "%.2f ms/tok tau %.2f nodes %.1f" % (rows[-1]["pred_ms_per_token"], rows[-1]["tau"], rows[-1]["nodes"]), flush=True)
json.dump(rows, open(out, "w"))
