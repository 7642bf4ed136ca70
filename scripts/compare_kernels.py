"""Median forward ms of the built-in target, n new tokens on a ctx-token cache: PyTorch's linears, the panel kernel
and (where it runs) the AMX kernel, one thread. The models alternate call by call, so a load drift of a shared machine
hits every column alike. This is how `caddtree.kernels.MAX_ROWS` was chosen.

Usage (repository root, venv active): python scripts/compare_kernels.py [ctx]
"""
import sys
import time

import torch

from caddtree.kernels import amx_available, pack_linears
from caddtree.target import load_target

SIZES = (1, 2, 3, 5, 9, 16, 17, 33, 65, 97)


def compare(ctx: int = 300, sizes=SIZES, reps: int = 12) -> None:
    torch.set_num_threads(1)
    targets = {"pytorch": load_target(pack=False)}
    for kind in ("panel", "amx") if amx_available() else ("panel",):
        targets[kind] = load_target(pack=False)
        pack_linears(targets[kind].model, kind)
        targets[kind].packed = True
    ids = torch.randint(0, 1000, (ctx,))
    caches = {}
    for name, target in targets.items():
        caches[name] = target.new_cache()
        target.forward(ids, caches[name])
    times = {(name, n): [] for name in targets for n in sizes}
    for _ in range(reps):
        for n in sizes:
            new = torch.randint(0, 1000, (n,))
            for name, target in targets.items():
                t0 = time.perf_counter()
                target.forward(new, caches[name])
                times[name, n].append((time.perf_counter() - t0) * 1e3)
                caches[name].crop(-n)
    print("n tokens | " + " | ".join(f"{name} ms" for name in targets))
    for n in sizes:
        print(f"{n:8d} | " + " | ".join(f"{sorted(times[name, n])[reps // 2]:{len(name) + 3}.1f}" for name in targets))


if __name__ == "__main__":
    compare(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
