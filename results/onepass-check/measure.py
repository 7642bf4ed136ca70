"""CaDDTree against CaDDTree capped at 5 nodes (one pass of the panel kernel) and a fixed 5-node tree, back to back
on each prompt (order reversed on every other prompt), 10 prompts per set, 256 tokens, greedy, mix drafter + gate.
Usage: python results/onepass-check/measure.py OUT.json SET[,SET...]"""
import os, sys, json, torch, statistics as st
os.environ.setdefault("CADDTREE_CPU_KERNEL","panel")
torch.set_num_threads(1)
from caddtree.target import load_target
from caddtree.cli import load_drafter_spec
from caddtree.profile import ensure_cost_model
from caddtree.engine import Decoder
from caddtree.datasets import load_prompts
t=load_target("smollm2-135m-instruct"); d=load_drafter_spec("dflash+lookup", t); cm=ensure_cost_model(t,d)
out=[]
decs={"caddtree":Decoder(t,d,"caddtree",cost_model=cm),"onepass":Decoder(t,d,"caddtree",cost_model=cm),"ddtree:5":Decoder(t,d,"ddtree",budget=5)}
decs["onepass"].budget=5
for ds in sys.argv[2].split(","):
    for p in load_prompts(ds,10):
        ids=t.chat_ids(p["prompt"])
        rec={"ds":ds,"id":str(p["id"])}
        order=list(decs) if len(out)%2==0 else list(reversed(decs))
        for m in order:
            r=decs[m].generate(ids,256); rec[m]=r.ms_per_token; rec[m+"_tau"]=r.mean_accepted
        out.append(rec); print(rec, flush=True)
json.dump(out,open(sys.argv[1],"w"))
