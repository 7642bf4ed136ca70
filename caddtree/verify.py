"""The target's side of one round, shared by the decoder (`engine`) and the profiler (`profile`) so that what is
timed is what decodes: the tree-verify forward, the commit of the accepted path into the KV cache, and the clock.

Invariant: before `verify_tree` the cache holds ℓ = ctx committed tokens (the root excluded); after it, ℓ + n + 1;
after `commit_path`, ℓ + 1 + |path| (root and accepted nodes, in path order).
"""
from __future__ import annotations

import time

import torch

from caddtree.target import Target, compact_cache
from caddtree.tree import Tree, verify_inputs


def now(device: torch.device) -> float:
    """Seconds on a monotonic clock, after the device has finished what was queued (CUDA kernels are asynchronous:
    time what has run, not what was launched)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def verify_tree(target: Target, cache, root: int, tree: Tree):
    """One target forward over [root, nodes] with the ancestor-only mask; the cache grows by n + 1.

    Returns logits [n + 1, V] and target features [n + 1, F] (None if the target reads no layers).
    """
    if len(tree) == 0:  # plain decoding step: causal default mask, no tree tensors to build
        return target.forward(torch.tensor([root], device=target.device), cache)
    ids, pos, mask = verify_inputs(root, tree, cache.get_seq_length(), device=target.device, dtype=target.dtype)
    return target.forward(ids, cache, position_ids=pos, attn_mask=mask)


def commit_path(cache, ctx: int, path: list[int], device) -> torch.Tensor:
    """Compact the cache after a verify at context `ctx` to [past, root, accepted nodes]; return the kept rows
    of the verify input ([1 + len(path)] indices into [root, nodes])."""
    kept = [0] + [i + 1 for i in path]
    in_place = next((j for j, r in enumerate(kept) if r != j), len(kept))  # rows already where they go
    rows = torch.tensor(kept, dtype=torch.long, device=device)
    compact_cache(cache, ctx, ctx + rows, in_place)
    return rows
