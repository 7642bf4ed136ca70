"""As measure.py, on the grid of the coarse profile preset (sizes 0-18, 32, 64 at ℓ = 128, 1024) instead of 0-18 at
four contexts: whether timing 32 and 64 nodes in each sweep changes the small sizes' medians. Writes one JSON line.
Run from the repository root: python results/zen5-staircase/measure_grid.py"""
import json

import torch

from caddtree.kernels import kernel_version
from caddtree.profile import _cpu_name, profile_verify
from caddtree.target import load_target

torch.set_num_threads(1)
target = load_target()
m = profile_verify(target, ns=[*range(19), 32, 64], ctxs=[128, 1024], repeats=9, warmup=2, progress=False)
print(json.dumps({"cpu": _cpu_name(), "kernel": kernel_version(), "ns": m["ns"], "ctxs": m["ctxs"],
                  "verify_ms": [[round(x, 2) for x in row] for row in m["verify_ms"]],
                  "verify_min_ms": [[round(x, 2) for x in row] for row in m["verify_min_ms"]]}))
