"""A cost profile's measurements refitted smooth: convex in n without the kernel's pass steps (row_group 1).
Usage: python results/counterfactual/refit_smooth.py PROFILE.json OUT.json"""
import json
import sys

from caddtree.costmodel import fit_cost_model, save_cost_model

d = json.load(open(sys.argv[1]))
save_cost_model(fit_cost_model({**d["measurements"], "verify_fit": "convex", "row_group": 1}, d["provenance"]),
                sys.argv[2])
