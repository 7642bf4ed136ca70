"""CPU linear layers for the row counts decoding uses: one small C++ kernel (`panel_linear.cpp`), built on first use.

Why: plain decoding multiplies every weight by one row, tree verification by a handful (2-65), and on CPU both are
bound by reading the weights from memory. PyTorch's GEMMs lose that from a few rows on: on this project's 2-core
machine (Intel Xeon, SmolLM2-135M fp32, 1 thread, 300-token cache, both cores busy; `python -m caddtree.kernels`)
PyTorch's default linears took 57.6 / 60.1 / 63.8 / 93.2 / 122.2 / 152.0 ms for a 1 / 2 / 3 / 5 / 9 / 33-token
forward, this kernel 54.5 / 61.2 / 65.1 / 75.7 / 86.9 / 131.6. The kernel streams each weight once in panels of P
columns and reuses a panel from cache for every group of up to 6 rows; P follows the vector registers of the CPU it
is built for (64 with AVX-512, 16 with AVX2: 64 on an AVX2-only AMD EPYC spilled its accumulators and took 117.6 /
518.8 ms for a 1 / 5-token forward, 16 takes 70.9 / 93.0, PyTorch 97.2 / 183.6; `results/kernels-avx2/`). Verify
cost at a 128-token context, previous kernels (one row `x @ W^T` with W^T stored contiguous, more rows
oneDNN-packed) -> panel kernel, profiled at the same time one per core (`results/kernels-ab/`): plain step 70.5 ->
65.7 ms, 1 tree node 89.3 -> 71.5, 4 nodes 98.8 -> 88.3, 8 nodes 105.6 -> 101.7, 16 nodes 126.5 -> 118.6; end to
end, tree methods 2-7% less time per token. Each output row is summed in the same order whatever the other rows are,
so a token's logits in a verified tree are bit-identical to the ones the plain step would compute from the same
activations.

Where the CPU has AMX (Intel Sapphire Rapids and later) and the OS grants it, CADDTREE_CPU_KERNEL=amx runs the same
source's AMX kernel instead (kernel version `amx1`): fp32 values split into bf16 hi + lo, three tile products per
step, fp32 sums, ~1e-5 relative error against fp32, batch-invariant in the same way. A tile product covers 16 rows for
the price of one, so verifying a tree of up to 15 nodes costs about one plain step's weight traffic: on an Intel Xeon
with AMX (SmolLM2-135M, 300-token cache, both cores busy) a 1 / 9 / 16-token forward took 114.8 / 184.8 / 208.6 ms
with the panel kernel, 124.0 / 140.6 / 147.5 ms with AMX. Plain decoding is ~8% slower with it (tile loads stream the
weights slower than vector loads), so it stays opt-in until an end-to-end A/B (`results/kernels-amx/commands.sh`)
shows the tree methods gaining more than that; the default is the panel kernel.

Rows above MAX_ROWS (prefill), grad mode, other dtypes and non-CPU tensors use `F.linear`. Without a C++ compiler
(or ninja) the kernel is not built: linears stay PyTorch's, with a one-line warning; decoding is the same, slower.
"""
from __future__ import annotations

import copy
import functools
import hashlib
import os
import platform
import sys
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from caddtree.errors import CaddtreeError

# in cost-profile keys (`kernel_version()`): bump when the CPU kernels change (linears here, attention and KV cache in
# caddtree.target, the DFlash drafter's output head), so no stale profile is reused
VERSIONS = {"panel": "panel2", "amx": "amx1"}  # panel2: the panel width follows the vector registers (was 64 always)
ROW_GROUP = {"panel": 6, "amx": 16}  # rows per pass: panel_linear.cpp's G_MAX, the rows of one AMX tile
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
    (`costmodel`, results/verify-staircase)."""
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


def _compare(ctx: int = 300, sizes=(1, 2, 3, 5, 9, 16, 17, 33, 65, 97), reps: int = 12) -> None:
    """Median forward ms of the built-in target, n new tokens on a ctx-token cache: PyTorch's linears, the panel
    kernel and (where it runs) the AMX kernel. The models alternate call by call, so a load drift of a shared machine
    hits every column alike."""
    import time

    from caddtree.target import load_target

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
    _compare()
