"""CPU linear layers for the row counts decoding uses: one small C++ kernel (`panel_linear.cpp`), built on first use.

Plain decoding multiplies every weight by one row, tree verification by a handful (2-97), and on a CPU both are
bound by reading the weights from memory, where a GEMM tuned for large batches loses. The kernel streams each weight
once in panels of P output columns ([ceil(N/P), K, P], `to_panels`) and reuses a panel from cache for every group of
up to `row_group()` rows; P follows the vector registers of the CPU it is built for (64 with AVX-512, 16 with AVX2).

Invariant (exactness): each output row is summed in the same order whatever the other rows are, so a token's logits
in a verified tree are bit-identical to the ones the plain step computes from the same activations (batch
invariance; tests/test_kernels.py).

CADDTREE_CPU_KERNEL=amx (Intel Sapphire Rapids and later, where the OS grants the tiles) runs the same source's AMX
kernel: fp32 values split into bf16 hi + lo, three tile products per step, fp32 sums, ~1e-5 relative error against
fp32, batch-invariant in the same way; opt-in. Rows above MAX_ROWS (prefill), grad mode, other dtypes and non-CPU
tensors use `F.linear`. Without a C++ compiler (or ninja) the kernel is not built: linears stay PyTorch's, with a
one-line warning; decoding is the same, slower. Measurements behind these choices: docs/design.md.
"""
from __future__ import annotations

import copy
import functools
import hashlib
import os
import sys
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.cpp_extension import load

from caddtree.errors import CaddtreeError
from caddtree.files import cache_dir, cpu_tag

# in cost-profile keys (`kernel_version()`): bump when the CPU kernels change (linears here, attention and KV cache in
# caddtree.target, the DFlash drafter's output head), so no stale profile is reused
VERSIONS = {"panel": "panel2", "amx": "amx1"}  # panel2: the panel width follows the vector registers (was 64 always)
ROW_GROUP = {"panel": 6, "amx": 16}  # rows per pass: panel_linear.cpp's G_MAX, the rows of one AMX tile
MAX_ROWS = 96  # above this PyTorch's GEMM wins (prefill); measured with `python scripts/compare_kernels.py`

_SOURCE = Path(__file__).with_name("panel_linear.cpp")


@functools.cache
def _library():
    """The compiled kernel module, or None (warned once) where it cannot be built."""
    key = hashlib.sha256(_SOURCE.read_bytes() + cpu_tag().encode() + torch.__version__.encode()).hexdigest()[:12]
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


def amx_available() -> bool:
    """The AMX kernel is built here and this CPU and OS let the process use its tiles."""
    return packing_available() and _library().amx_available()


@functools.cache
def _kind() -> str:
    """'panel', or 'amx' when CADDTREE_CPU_KERNEL=amx asks for it (opt-in until measured faster end to end)."""
    want = os.environ.get("CADDTREE_CPU_KERNEL", "panel")
    if want not in ("panel", "amx"):
        raise CaddtreeError(f"CADDTREE_CPU_KERNEL={want!r}: use panel (default) or amx")
    if want == "amx" and not amx_available():
        raise CaddtreeError("CADDTREE_CPU_KERNEL=amx, but this CPU or OS has no AMX tiles: unset it or use panel")
    return want


def kernel_version() -> str:
    """The CPU linear kernel packed models run here, as it appears in cost-profile keys."""
    return VERSIONS[_kind()]


def row_group() -> int:
    """Rows the kernel multiplies per pass over the weights: a verify that starts a new pass costs a jump
    (`costmodel`, docs/design.md)."""
    return ROW_GROUP[_kind()]


def panel_width() -> int:
    """Output columns per panel of this machine's build (panel_linear.cpp's P: 64 with AVX-512, 16 with AVX2)."""
    return _library().panel_width()


def to_panels(weight: torch.Tensor, width: int | None = None) -> torch.Tensor:
    """W [N, K] -> panels [ceil(N/P), K, P], zero-padded: panel b, row k = W[Pb : Pb+P, k]; P = panel_width()."""
    p = width or panel_width()
    n, k = weight.shape
    blocks = -(-n // p)
    padded = F.pad(weight.detach().float(), (0, 0, 0, blocks * p - n))  # [blocks*P, K]
    return padded.view(blocks, p, k).transpose(1, 2).contiguous()


class PackedLinear(nn.Module):
    """Drop-in for an inference-only fp32 `nn.Linear` on CPU. `weight` stays the same Parameter (tied weights stay
    tied); the packed layout is the one extra copy. kind: 'panel' or 'amx' (default: `_kind()`)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None, kind: str | None = None):
        super().__init__()
        self.weight, self.bias = weight, bias
        self.out_features, self.in_features = weight.shape
        self.kind = kind or _kind()
        if self.kind == "amx":  # [ceil(N/64), ceil(K/32), 4, 2, 16, 32] bf16 hi/lo tiles
            self.packed = _library().amx_pack(weight.detach().float().contiguous())
        else:  # [ceil(N/P), K, P]
            self.packed = to_panels(weight)

    def __deepcopy__(self, memo):
        return PackedLinear(copy.deepcopy(self.weight, memo), copy.deepcopy(self.bias, memo), self.kind)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1]
        if (not 0 < rows <= MAX_ROWS or x.device.type != "cpu" or x.dtype != torch.float32
                or torch.is_grad_enabled()):
            return F.linear(x, self.weight, self.bias)
        run = _library().amx_linear if self.kind == "amx" else _library().panel_linear
        y = run(x.reshape(rows, self.in_features).contiguous(), self.packed, self.out_features)  # [rows, N]
        if self.bias is not None:
            y += self.bias
        return y.reshape(*x.shape[:-1], self.out_features)


def pack_linears(module: nn.Module, kind: str | None = None) -> int:
    """Replace every fp32 CPU `nn.Linear` inside `module` by a `PackedLinear` (of `kind`, default: the machine's);
    returns how many were replaced."""
    if not packing_available():
        return 0
    count = 0
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear and child.weight.device.type == "cpu" and child.weight.dtype == torch.float32:
                setattr(parent, name, PackedLinear(child.weight, child.bias, kind))
                count += 1
    return count
