"""CPU linear layers for the row counts decoding uses: one small C++ kernel (`panel_linear.cpp`), built on first use.

Why: plain decoding multiplies every weight by one row, tree verification by a handful (2-65), and on CPU both are
bound by reading the weights from memory. PyTorch's GEMMs lose that from a few rows on: on this project's 2-core
machine (Intel Xeon, SmolLM2-135M fp32, 1 thread, 300-token cache, both cores busy; `python -m caddtree.kernels`)
PyTorch's default linears took 57.6 / 60.1 / 63.8 / 93.2 / 122.2 / 152.0 ms for a 1 / 2 / 3 / 5 / 9 / 33-token
forward, this kernel 54.5 / 61.2 / 65.1 / 75.7 / 86.9 / 131.6. The kernel streams each weight once in 64-column
panels and reuses a panel from cache for every group of up to 6 rows. Verify cost at a 128-token context, previous
kernels (one row `x @ W^T` with W^T stored contiguous, more rows oneDNN-packed) -> panel kernel, profiled at the same
time one per core (`results/kernels-ab/`): plain step 70.5 -> 65.7 ms, 1 tree node 89.3 -> 71.5, 4 nodes 98.8 -> 88.3,
8 nodes 105.6 -> 101.7, 16 nodes 126.5 -> 118.6; end to end, tree methods 2-7% less time per token. Each output row
is summed in the same order whatever the other rows are, so a token's logits in a verified tree are bit-identical to
the ones the plain step would compute from the same activations.

Rows above MAX_ROWS (prefill), grad mode, other dtypes and non-CPU tensors use `F.linear`. Without a C++ compiler
(or ninja) the kernel is not built: linears stay PyTorch's, with a one-line warning; decoding is the same, slower.
"""
from __future__ import annotations

import copy
import functools
import hashlib
import platform
import sys
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

# in cost-profile keys: bump when the CPU kernels change (linears here, attention and KV cache in caddtree.target, the
# DFlash drafter's output head), so no stale profile is reused
KERNELS = "panel1"
PANEL = 64  # output columns per panel (panel_linear.cpp's P)
MAX_ROWS = 96  # above this PyTorch's GEMM wins (prefill); measured with `python -m caddtree.kernels`

_SOURCE = Path(__file__).with_name("panel_linear.cpp")


def _cpu_tag() -> str:
    """The build uses -march=native: key it by the CPU as well as the source, so a shared cache never runs code
    built for another CPU."""
    cpu = platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu += "".join(line for line in f if line.startswith(("model name", "flags", "Features")))
    except OSError:
        pass
    return cpu


@functools.cache
def _library():
    """The compiled kernel module, or None (warned once) where it cannot be built."""
    from torch.utils.cpp_extension import load

    from caddtree.target import cache_dir
    key = hashlib.sha256(_SOURCE.read_bytes() + _cpu_tag().encode() + torch.__version__.encode()).hexdigest()[:12]
    build = cache_dir() / "kernels" / key
    try:  # no compiler, no ninja, unsupported platform, unwritable cache: keep PyTorch's linears
        build.mkdir(parents=True, exist_ok=True)
        if not any(build.glob("*.so")):
            print(f"caddtree: compiling the CPU linear kernel into {build} (once per machine, ~30 s)", file=sys.stderr)
        return load(name=f"caddtree_panel_linear_{key}", sources=[str(_SOURCE)], build_directory=str(build),
                    extra_cflags=["-O3", "-march=native"], verbose=False)
    except Exception as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        warnings.warn(f"caddtree: CPU linear kernel not built ({first}); decoding uses PyTorch's linears (same "
                      f"output, slower tree verification). Install a C++ compiler and ninja to enable it.",
                      stacklevel=2)
        return None


def packing_available() -> bool:
    return _library() is not None


def to_panels(weight: torch.Tensor) -> torch.Tensor:
    """W [N, K] -> panels [ceil(N/64), K, 64], zero-padded: panel b, row k = W[64b : 64b+64, k]."""
    n, k = weight.shape
    blocks = -(-n // PANEL)
    padded = F.pad(weight.detach().float(), (0, 0, 0, blocks * PANEL - n))  # [blocks*64, K]
    return padded.view(blocks, PANEL, k).transpose(1, 2).contiguous()


class PackedLinear(nn.Module):
    """Drop-in for an inference-only fp32 `nn.Linear` on CPU. `weight` stays the same Parameter (tied weights stay
    tied); the panels are the one extra copy."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None):
        super().__init__()
        self.weight, self.bias = weight, bias
        self.out_features, self.in_features = weight.shape
        self.panels = to_panels(weight)  # [ceil(N/64), K, 64]

    def __deepcopy__(self, memo):
        return PackedLinear(copy.deepcopy(self.weight, memo), copy.deepcopy(self.bias, memo))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1]
        if (not 0 < rows <= MAX_ROWS or x.device.type != "cpu" or x.dtype != torch.float32
                or torch.is_grad_enabled()):
            return F.linear(x, self.weight, self.bias)
        y = _library().panel_linear(x.reshape(rows, self.in_features).contiguous(), self.panels,
                                    self.out_features)  # [rows, N]
        if self.bias is not None:
            y += self.bias
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


def _compare(ctx: int = 300, sizes=(1, 2, 3, 5, 9, 17, 33, 65, 97, 129), reps: int = 12) -> None:
    """Median forward ms of the built-in target, n new tokens on a ctx-token cache, PyTorch's linears vs the panel
    kernel. The two models alternate call by call, so a load drift of a shared machine hits both columns alike."""
    import time

    from caddtree.target import load_target

    torch.set_num_threads(1)
    targets = {"pytorch": load_target(pack=False), "panel": load_target(pack=True)}
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
    print("n tokens | pytorch ms | panel ms")
    for n in sizes:
        a, b = (sorted(times[name, n])[reps // 2] for name in targets)
        print(f"{n:8d} | {a:10.1f} | {b:8.1f}")


if __name__ == "__main__":
    _compare()
