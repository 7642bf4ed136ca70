"""Verify cost of SmolLM2-135M for every tree size 0-18 at the contexts a 256-token generation runs through, on this
machine's default CPU kernel: the profiler's own measurement (`caddtree.profile.profile_verify`) on a finer grid than
its presets. Writes one JSON line to stdout. Run from the repository root: python results/zen5-staircase/measure.py"""
import json

import torch

from caddtree.kernels import kernel_version
from caddtree.profile import _cpu_name, profile_verify
from caddtree.target import load_target

torch.set_num_threads(1)
target = load_target()
ns, ctxs = list(range(19)), [128, 256, 384, 1024]
m = profile_verify(target, ns=ns, ctxs=ctxs, repeats=9, warmup=2, progress=False)
print(json.dumps({"cpu": _cpu_name(), "kernel": kernel_version(), "ns": m["ns"], "ctxs": m["ctxs"],
                  "verify_ms": [[round(x, 2) for x in row] for row in m["verify_ms"]],
                  "verify_min_ms": [[round(x, 2) for x in row] for row in m["verify_min_ms"]]}))
