"""Verify cost of SmolLM2-135M for every tree size of a grid, on this machine's default CPU kernel: the profiler's own
measurement (`caddtree.profile.profile_verify`, 9 sweeps after 2 warm-up) on a finer grid than its presets. Writes one
JSON line to stdout. Run from the repository root:
    python results/zen5-staircase/measure.py            # sizes 0-18 at ℓ = 128, 256, 384, 1024
    python results/zen5-staircase/measure.py grid       # the coarse preset's grid: 0-18, 32, 64 at ℓ = 128, 1024
"""
import json
import sys

import torch

from caddtree.kernels import kernel_version
from caddtree.profile import _cpu_name, profile_verify
from caddtree.target import load_target

GRIDS = {"staircase": ([*range(19)], [128, 256, 384, 1024]), "grid": ([*range(19), 32, 64], [128, 1024])}
ns, ctxs = GRIDS[sys.argv[1] if len(sys.argv) > 1 else "staircase"]
torch.set_num_threads(1)
target = load_target()
m = profile_verify(target, ns=ns, ctxs=ctxs, repeats=9, warmup=2, progress=False)
print(json.dumps({"cpu": _cpu_name(), "kernel": kernel_version(), "ns": m["ns"], "ctxs": m["ctxs"],
                  "verify_ms": [[round(x, 2) for x in row] for row in m["verify_ms"]],
                  "verify_min_ms": [[round(x, 2) for x in row] for row in m["verify_min_ms"]]}))
