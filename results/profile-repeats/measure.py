"""The coarse verify profile 3 times with 3 repeats and 3 times with 9, alternating; per profile the fitted C_v(0..12)
at ctx 300 and the raw medians. Usage: python results/profile-repeats/measure.py OUT.json"""
import os, sys, json, torch, numpy as np
os.environ.setdefault("CADDTREE_CPU_KERNEL","panel")
torch.set_num_threads(1)
from caddtree.target import load_target
from caddtree.profile import profile_verify, PRESETS
from caddtree.costmodel import fit_cost_model
t=load_target("smollm2-135m-instruct")
out=[]
p=dict(PRESETS["coarse"])
for it in range(3):
    for rep in (3,9):
        p.update(repeats=rep)
        m=profile_verify(t, progress=False, **p)
        meas={**m, "draft_ms":[5.0]*len(m["ctxs"]), "new_tokens_per_draft":1}
        try:
            cm=fit_cost_model(meas)
            cv=cm.verify_curve(300)[:13].round(2).tolist(); J=None
        except Exception as e:
            cv=str(e); J=None
        out.append({"it":it,"repeats":rep,"cv300":cv,"raw":m["verify_ms"]})
        print(rep, cv, flush=True)
json.dump(out,open(sys.argv[1],"w"))
