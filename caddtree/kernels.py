"""CPU linear layers laid out for the row counts decoding uses.

Why: verifying a tree multiplies every weight by a handful of rows (2-65), and PyTorch's default CPU GEMM re-packs
the weight on each such call. On this project's 2-core machine (SmolLM2-135M fp32, 1 thread, 256-token cache, the
other core busy) a 2-token forward took 111-133 ms against 69-74 ms for one token; with the weights packed once for
oneDNN it took 89-94 ms, and 10-20% less from 3 to 33 tokens (3: 150-158 -> 110-113 ms, 33: 269-279 -> 221-259 ms).
One row (plain decoding, and every CaDDTree round that picks the empty tree) is fastest as `x @ W^T` with W^T stored
contiguous ([in, out]): the weight is then streamed row after row instead of read as 576-float dot products. Same
machine, 300-token cache, interleaved medians: 1-token forward 56.0 -> 46.8 ms with the other core idle (LM head
alone: 8.0 -> 4.4 ms), 72.5 -> 66.9 ms with it busy (`python -m caddtree.kernels`); for 2 tokens W^T and the packed
weights tie (72.7 vs 73.5 ms), from 3 tokens on the packed weights win (77 vs 89 ms).
So each linear keeps its weight transposed in place (the same Parameter: tied weights stay tied, and the packed copy
stays the only extra one). Reproduce with `python -m caddtree.kernels` (default vs packed forwards).
"""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn


# in cost-profile keys: bump when the CPU kernels change (linears here, attention and KV cache in caddtree.target, the
# DFlash drafter's output head), so no stale profile is reused
KERNELS = "packed4"


def packing_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


class PackedLinear(nn.Module):
    """Drop-in for an inference-only `nn.Linear` on CPU. `weight` stays the same Parameter object (tied weights stay
    tied) but its storage becomes W^T contiguous; multi-row calls use a oneDNN-packed copy."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None):
        super().__init__()
        self.weight, self.bias = weight, bias
        self.out_features, self.in_features = weight.shape
        w = weight.detach()
        self.packed = torch.ops.mkldnn._reorder_linear_weight(w.contiguous(), None)
        if not w.t().is_contiguous():  # re-lay the storage once; already done if the weight is shared and packed
            weight.data = w.t().contiguous().t()

    def __deepcopy__(self, memo):  # oneDNN's packed tensor has no storage to copy: re-pack the copied weight
        return PackedLinear(copy.deepcopy(self.weight, memo), copy.deepcopy(self.bias, memo))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1]
        # one row: F.linear computes x @ weight.t(), which the W^T storage makes a contiguous [in, out] read
        if rows == 1 or x.device.type != "cpu" or x.dtype != torch.float32 or torch.is_grad_enabled():
            return F.linear(x, self.weight, self.bias)
        y = torch.ops.mkldnn._linear_pointwise(x.reshape(rows, x.shape[-1]), self.packed, self.bias, "none", [], "")
        return y.reshape(*x.shape[:-1], self.out_features)


def pack_linears(module: nn.Module) -> int:
    """Replace every fp32 CPU `nn.Linear` inside `module` by a `PackedLinear`; returns how many were replaced."""
    if not packing_available():
        return 0
    count = 0
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear and child.weight.device.type == "cpu" and child.weight.dtype == torch.float32:
                setattr(parent, name, PackedLinear(child.weight, child.bias))
                count += 1
    return count


def _compare(ctx: int = 300, sizes=(1, 2, 3, 5, 9, 17, 33), reps: int = 12) -> None:
    """Median forward ms of the built-in target, n new tokens on a ctx-token cache, default vs packed linears.
    The two models alternate call by call, so a load drift of a shared machine hits both columns alike."""
    import time

    from caddtree.target import load_target

    torch.set_num_threads(1)
    targets = {"default": load_target(pack=False), "packed": load_target(pack=True)}
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
    print("n tokens | default ms | packed ms")
    for n in sizes:
        a, b = (sorted(times[name, n])[reps // 2] for name in targets)
        print(f"{n:8d} | {a:10.1f} | {b:9.1f}")


if __name__ == "__main__":
    _compare()
