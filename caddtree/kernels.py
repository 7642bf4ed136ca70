"""CPU linear layers with weights pre-packed once for oneDNN.

Why: verifying a tree multiplies every weight by a handful of rows (2-65), and PyTorch's default CPU GEMM re-packs
the weight on each such call. On this project's 2-core machine (SmolLM2-135M fp32, 1 thread, 256-token cache, the
other core busy) a 2-token forward took 111-133 ms against 69-74 ms for one token; with the weights packed once it
took 89-94 ms, and 10-20% less from 3 to 33 tokens (3: 150-158 -> 110-113 ms, 33: 269-279 -> 221-259 ms).
The 49k-row LM head gains most (2 rows: 22 -> 10 ms). A single row keeps PyTorch's GEMV (packed oneDNN is slower
there), so plain decoding is unchanged. Reproduce with `python -m caddtree.kernels` (prints both columns).
"""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn


def packing_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


class PackedLinear(nn.Module):
    """Drop-in for an inference-only `nn.Linear` on CPU; `weight`/`bias` stay the original (shared) tensors."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None):
        super().__init__()
        self.weight, self.bias = weight, bias  # the same tensors: tied weights stay tied
        self.out_features, self.in_features = weight.shape
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), None)

    def __deepcopy__(self, memo):  # oneDNN's packed tensor has no storage to copy: re-pack the copied weight
        return PackedLinear(copy.deepcopy(self.weight, memo), copy.deepcopy(self.bias, memo))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1]
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


def _compare(ctx: int = 256, sizes=(1, 2, 3, 5, 9, 17, 33, 65), reps: int = 11) -> None:
    """Median forward ms of the built-in target, n new tokens on a ctx-token cache, default vs packed linears."""
    import time

    from caddtree.target import load_target

    torch.set_num_threads(1)

    def run(target) -> list[float]:
        ids = torch.randint(0, 1000, (ctx,))
        out = []
        for n in sizes:
            times = []
            for _ in range(reps):
                cache = target.new_cache()
                target.forward(ids, cache)
                t0 = time.perf_counter()
                target.forward(torch.randint(0, 1000, (n,)), cache)
                times.append((time.perf_counter() - t0) * 1e3)
            out.append(sorted(times)[reps // 2])
        return out

    plain, packed = run(load_target(pack=False)), run(load_target(pack=True))
    print("n tokens | default ms | packed ms")
    for n, a, b in zip(sizes, plain, packed):
        print(f"{n:8d} | {a:10.1f} | {b:9.1f}")


if __name__ == "__main__":
    _compare()
