"""Verify cost of SmolLM2-135M for every tree size 0-12 (and 16) at a 128-token context, on this machine's default
CPU kernel: the profiler's own measurement (`caddtree.profile.profile_verify`) on a finer grid than its presets.
Writes one JSON line to stdout. Run from the repository root: python results/verify-staircase/measure.py"""
import json

import torch

from caddtree.kernels import kernel_version
from caddtree.profile import _cpu_name, profile_verify
from caddtree.target import load_target

torch.set_num_threads(1)
target = load_target()
ns = list(range(13)) + [16]
m = profile_verify(target, ns=ns, ctxs=[128], repeats=9, warmup=2, progress=False)
print(json.dumps({"cpu": _cpu_name(), "kernel": kernel_version(), "ns": ns,
                  "verify_ms": [round(x, 2) for x in m["verify_ms"][0]]}))
