"""Verify cost of SmolLM2-135M for every tree size 0-20 and a few larger ones at 128- and 512-token contexts, on this
machine's default CPU kernel: the profiler's own measurement (`caddtree.profile.profile_verify`), medians (and minima)
of 9 sweeps. Writes one JSON line to stdout. Run from the repository root, one per core at the same time:
  export OMP_NUM_THREADS=1
  S=results/bench-intel-monofit/staircase
  taskset -c 0 python $S/measure.py > $S/core0.json & taskset -c 1 python $S/measure.py > $S/core1.json &
  wait
(07:12 UTC, before the phase-6 data generation started: both cores measuring.)"""
import json

import torch

from caddtree.kernels import kernel_version
from caddtree.profile import _cpu_name, profile_verify
from caddtree.target import load_target

torch.set_num_threads(1)
target = load_target()
ns = list(range(21)) + [23, 24, 29, 30, 35, 36, 48, 64]
m = profile_verify(target, ns=ns, ctxs=[128, 512], repeats=9, warmup=2, progress=False)
print(json.dumps({"cpu": _cpu_name(), "kernel": kernel_version(), "ns": m["ns"], "ctxs": m["ctxs"],
                  "verify_ms": m["verify_ms"], "verify_min_ms": m["verify_min_ms"]}))
