"""The cost profile `caddtree@ab` runs with in the second A/B (results/zen5-profile-ab/README.md): C_v from
results/zen5-staircase/ (every size 0-18 at ℓ = 128, 256, 384, 1024, 9 sweeps, the mean of its two cores), C_d and
the overhead from the run's own profile (interpolated to those ℓ). Run from the repository root:
python results/zen5-profile-ab/staircase_profile.py RUN_PROFILE.json OUT.json"""
import json
import sys

import numpy as np

from caddtree.costmodel import fit_cost_model, load_cost_model, save_cost_model

base = load_cost_model(sys.argv[1])
cores = [json.load(open(f"results/zen5-staircase/core{i}.json")) for i in (0, 1)]
ctxs = cores[0]["ctxs"]
verify = (np.asarray(cores[0]["verify_ms"]) + np.asarray(cores[1]["verify_ms"])) / 2
meas = {"ns": cores[0]["ns"], "ctxs": ctxs, "verify_ms": verify.round(3).tolist(), "row_group": 6,
        "verify_fit": "monotone", "repeats": 9, "warmup": 2,
        "draft_ms": [round(base.draft_ms(c), 3) for c in ctxs],
        "cheap_draft_ms": [round(base.cheap_draft_ms(c), 3) for c in ctxs],
        "overhead_ms": [round(base.overhead_ms(c), 3) for c in ctxs]}
model = fit_cost_model(meas, {**base.provenance, "verify": "results/zen5-staircase"})
save_cost_model(model, sys.argv[2])
print([round(x, 1) for x in model.verify_curve(256)])
