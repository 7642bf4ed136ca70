"""Verify time per tree size at one ℓ (SmolLM2, random 300-token cache, random best-first trees), median of 38 sweeps
after 2 warm-up ones; seed 0: the sizes in ascending order every sweep, another seed: in a random order per sweep.
Usage: python results/zen5-profile-shape/sizes.py CTX SWEEPS SEED"""
import sys, numpy as np, torch
from caddtree.target import load_target
from caddtree.engine import verify_tree, _now
from caddtree.tree import build_tree
from caddtree.profile import _prefill, _crop_to
torch.set_num_threads(1)
ctx, sweeps, seed = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
sizes = [0, 1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]
t = load_target("smollm2-135m-instruct")
g = torch.Generator().manual_seed(0)
V = t.vocab_size
ids = torch.randint(0, V, (ctx + 1,), generator=g)
cache = t.new_cache(); _prefill(t, cache, ids[:-1]); root = int(ids[-1])
lp = torch.log_softmax(torch.randn(8, V, generator=g) * 3.0, dim=-1)
full = build_tree(lp, max(sizes)); trees = {n: full.prefix(n) for n in sizes}
rng = np.random.default_rng(seed)
times = {n: [] for n in sizes}
with torch.inference_mode():
    for s in range(sweeps):
        for n in (rng.permutation(sizes) if seed else sizes):
            t0 = _now(t.device); verify_tree(t, cache, root, trees[int(n)]); dt = _now(t.device) - t0
            _crop_to(cache, ctx)
            if s >= 2: times[int(n)].append(dt * 1000)
m = {n: np.median(v) for n, v in times.items()}
print(f"ctx {ctx} seed {seed}: " + " ".join(f"{n}:{m[n]:.1f}" for n in sizes))
print("   rel n=5: " + " ".join(f"{n}:{m[n]-m[5]:+.1f}" for n in sizes))
