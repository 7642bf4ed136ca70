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
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from filelock import FileLock
from gguf import GGMLQuantizationType, quants
from torch import nn
from torch.utils.cpp_extension import load

from caddtree.errors import CaddtreeError
from caddtree.files import cache_dir, cpu_tag

# in cost-profile keys (`kernel_version()`): bump when the CPU kernels change (linears here, attention and KV cache in
# caddtree.target, the DFlash drafter's output head), so no stale profile is reused
# panel3/amx2: multithreaded (OpenMP), was serial; quant3: prefetch spread over the block loop (quant2: a burst per strip)
VERSIONS = {"panel": "panel3", "amx": "amx2", "quant": "quant3"}
ROW_GROUP = {"panel": 6, "amx": 16}  # rows per pass: panel_linear.cpp's G_MAX, the rows of one AMX tile
MAX_ROWS = 96  # above this PyTorch's GEMM wins (prefill); measured with `python scripts/compare_kernels.py`

_SOURCES = [Path(__file__).with_name(f) for f in ("panel_linear.cpp", "quant_linear.cpp", "attention.cpp",
                                                 "lean_layers.cpp", "draft_layers.cpp", "sample.cpp")]
_HEADERS = [Path(__file__).with_name(f) for f in ("vec16.h", "layer_ops.h")]
# OpenMP: at::parallel_for in the kernels is an `omp parallel` region only when compiled with -fopenmp (else every call
# runs on one thread). Linked by soname (libgomp.so.1), it binds to the runtime torch has already loaded, so
# torch.set_num_threads governs it and no second thread pool spins beside torch's.
_OPENMP = ["-fopenmp"] if sys.platform.startswith("linux") else []


def _build_dir() -> Path:
    """Where this source, CPU and torch version's build lives: cache_dir()/kernels/<hash of all three>."""
    source = b"".join(p.read_bytes() for p in _SOURCES + _HEADERS) + " ".join(_OPENMP).encode()
    digest = hashlib.sha256(source + cpu_tag().encode() + torch.__version__.encode()).hexdigest()
    return cache_dir() / "kernels" / digest[:12]


@functools.cache
def _library():
    """The compiled kernel module, or None (warned once) where it cannot be built."""
    build = _build_dir()
    key = build.name
    try:  # no compiler, no ninja, unsupported platform, unwritable cache: keep PyTorch's linears
        build.mkdir(parents=True, exist_ok=True)
        # torch's own build lock (build/lock) is a plain file: a build killed midway (Ctrl-C on the first run) leaves
        # it behind, and every later load then waits on it forever, silently. Builds are serialised by an OS file
        # lock instead, which dies with its holder; under it a leftover `lock` can only be stale.
        with FileLock(str(build / "caddtree.lock")):
            if (build / "lock").exists():
                print(f"caddtree: removing a stale build lock left by an interrupted build in {build}",
                      file=sys.stderr)
                (build / "lock").unlink(missing_ok=True)
            if not any(build.glob("*.so")):
                print(f"caddtree: compiling the CPU linear kernel into {build} (once per machine, ~30 s)",
                      file=sys.stderr)
            return load(name=f"caddtree_cpu_kernels_{key}", sources=[str(p) for p in _SOURCES],
                        build_directory=str(build), extra_cflags=["-O3", "-march=native", *_OPENMP],
                        extra_ldflags=_OPENMP, verbose=False)
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
    """Replace every CPU `nn.Linear` inside `module` by a batch-invariant kernel's: fp32 ones by a `PackedLinear` (of
    `kind`, default: the machine's), fp16/bf16 ones whose input width is a multiple of 32 by a `half_linear` over
    their own weight rows (no copy); returns how many were replaced."""
    if not packing_available():
        return 0

    def packed(lin: nn.Linear) -> nn.Module | None:
        if lin.weight.dtype == torch.float32:
            return PackedLinear(lin.weight, lin.bias, kind)
        if lin.weight.dtype in HALF_TYPES and lin.in_features % 32 == 0:
            return half_linear(lin.weight, lin.bias)
        return None
    return replace_linears(module, packed)


def replace_linears(module: nn.Module, make) -> int:
    """Replace every CPU `nn.Linear` inside `module` by make(linear), where that is not None; returns how many were
    replaced (what `pack_linears`, `quantize_linears` and `drafter_linears` share)."""
    count = 0
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear and child.weight.device.type == "cpu":
                new = make(child)
                if new is not None:
                    setattr(parent, name, new)
                    count += 1
    return count


def half_linear(weight: torch.Tensor, bias: torch.Tensor | None = None) -> "QuantLinear":
    """A `QuantLinear` over an fp16/bf16 W [N, K] (K a multiple of 32) as it is: its rows are blocks of the F16/BF16
    type, read in place (a view of the same storage), widened to fp32 exactly and summed in fp32 row by row."""
    w = weight.detach().contiguous()  # itself where already contiguous: then `rows` shares its storage
    return QuantLinear(w.view(torch.uint8), HALF_TYPES[w.dtype], w.shape[1], bias, weight)


class FusedLinear(nn.Module):
    """Linears that read the same input, run as one: y = cat([m(x) for m in parts], -1) [..., ΣN]. The generic form
    (one call per part); `fuse_linears` returns a single kernel call where the parts' kind allows it."""

    def __init__(self, parts: list[nn.Module]):
        super().__init__()
        self.parts = nn.ModuleList(parts)
        self.out_features = sum(p.out_features for p in parts)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([p(x) for p in self.parts], dim=-1)


def fuse_linears(parts: list[nn.Module]) -> nn.Module:
    """One module computing cat([p(x) for p in parts], -1) (e.g. q/k/v, or gate/up): a single kernel call where every
    part is a linear of the same kind (their weight rows concatenated, a copy), else `FusedLinear`. Each output column
    is computed as in its own part, so results are unchanged bit for bit."""
    fuse = getattr(type(parts[0]), "cat_rows", None)  # e.g. caddtree.quant.QuantLinear.cat_rows
    if fuse is not None and all(type(p) is type(parts[0]) for p in parts):
        fused = fuse(parts)
        if fused is not None:
            return fused
    kinds = {p.kind if type(p) is PackedLinear else None for p in parts}
    if all(type(p) is PackedLinear for p in parts) and len(kinds) == 1:
        return PackedLinear(torch.cat([p.weight.detach() for p in parts]), cat_biases(parts), kinds.pop())
    return FusedLinear(parts)


def cat_biases(parts: list[nn.Module]) -> torch.Tensor | None:
    """The biases of linears fused row-wise, zeros for a part without one; None if no part has a bias."""
    ref = next((p.bias for p in parts if p.bias is not None), None)
    if ref is None:
        return None
    return torch.cat([p.bias.detach() if p.bias is not None else ref.new_zeros(p.out_features) for p in parts])


# ------------------------------------------------------------------------------------------- GGUF blocks as stored
GGML_TYPES = {"F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 8, "BF16": 30}  # what quant_linear.cpp reads: name -> id
# GGUF types read once repacked at load into a kernel layout, exactly (`gguf_weights.kernel_blocks`): Q4_K -> Q4_1S,
# Q5_0 -> Q5_0S, Q5_1 and Q5_K -> Q5_1S, Q6_K -> Q8S (quant_linear.cpp describes the layouts)
REPACKED_TYPES = {"Q5_0": 6, "Q5_1": 7, "Q4_K": 12, "Q5_K": 13, "Q6_K": 14}
# bytes per 32 weights; 102/103: Q4_0/Q4_1 with fp32 scales, 106/107: Q5_0S/Q5_1S, 108: Q8S
BLOCK_BYTES = {1: 64, 2: 18, 3: 20, 8: 34, 30: 64, 102: 20, 103: 24, 106: 24, 107: 28, 108: 48}
HALF_TYPES = {torch.float16: 1, torch.bfloat16: 30}  # a half-precision model's weight rows are blocks of these types
HALF_DTYPES = {t: d for d, t in HALF_TYPES.items()}  # and back: F16/BF16 rows viewed as the weight
KERNEL_DTYPES = (torch.float32, *HALF_TYPES)  # activations QuantLinear and row_attention take (fp16/bf16 widened)


def to_q8s(rows: torch.Tensor, kernel_type: int) -> torch.Tensor:
    """Q4_0S / Q4_1S / Q5_0S / Q5_1S / Q8_0 / Q8S rows [N, K/32 · bytes] -> the same weights as Q8S rows [N, K/32 ·
    48]: d, m widened (Q8_0's fp16 d exactly), q as int8 (Q4_0's q - 8, Q5_0's q - 16), m = -0.0 where a type has
    none, so fma(q, d, m) gives each type's own value (d·q + m rounded once, or the exact product d·q) bit for bit."""
    if kernel_type == 108:
        return rows
    b = rows.numpy().reshape(-1, BLOCK_BYTES[kernel_type])  # [blocks, bytes]
    m = np.full((b.shape[0], 1), -0.0, dtype=np.float32)
    if kernel_type == 8:
        d, q = np.ascontiguousarray(b[:, :2]).view(np.float16).astype(np.float32), b[:, 2:].view(np.int8)
    else:  # d, [m], nibbles (element j < 16 the low nibble of byte j, j + 16 its high one), [32 high bits]
        at = 4 if kernel_type in (102, 106) else 8
        d = np.ascontiguousarray(b[:, :4]).view(np.float32)
        if kernel_type in (103, 107):
            m = np.ascontiguousarray(b[:, 4:8]).view(np.float32)
        q = np.concatenate([b[:, at:at + 16] & 0x0F, b[:, at:at + 16] >> 4], 1)
        if kernel_type in (106, 107):
            q = q | (np.unpackbits(b[:, at + 16:], axis=1, bitorder="little") << 4)
        q = q.astype(np.int8) - np.int8({102: 8, 106: 16}.get(kernel_type, 0))
    head = np.concatenate([d, d, m, m], 1).astype(np.float32).view(np.uint8)
    out = np.concatenate([head, q.astype(np.int8).view(np.uint8)], 1)
    return torch.from_numpy(out.reshape(rows.shape[0], -1))


TO_Q8S = (8, 102, 103, 106, 107, 108)  # the kernel layouts `to_q8s` rewrites


def quant_row_group() -> int:
    """Input rows the GGUF-block kernel multiplies per pass over the weights (8 with AVX-512: its register groups; 5
    with AVX2: rows per pass over a dequantized strip)."""
    return _library().quant_row_group()


class QuantLinear(nn.Module):
    """Drop-in for an inference-only linear whose weight W [N, K] is a GGUF tensor: `blocks` [N, K/32 · bytes per
    block] uint8 are its rows as the file stores them, kept as `rows` in the layout quant_linear.cpp runs (4-bit
    types with their fp16 scales widened to fp32, `kernel_type`; other types as stored), dequantized on the fly,
    exactly, and summed in fp32. An fp16/bf16 model's weight is such a tensor too (types F16, BF16: `half_linear`).
    `weight`, the same values (the model's Parameter, or None), serves calls the kernel does not take: more than
    MAX_ROWS rows (prefill), grad mode, non-CPU inputs, dtypes other than fp32/fp16/bf16. fp16/bf16 inputs are widened
    to fp32 (exactly), and the fp32 sums rounded once to the input's dtype: each row still alone, so still
    batch-invariant. kernel_type: `blocks` are already in that kernel layout (as `cat_rows` passes them; required for
    the REPACKED_TYPES, whose blocks `gguf_weights.kernel_blocks` converts)."""

    def __init__(self, blocks: torch.Tensor, ggml_type: int, in_features: int, bias: torch.Tensor | None = None,
                 weight: torch.Tensor | None = None, kernel_type: int | None = None):
        super().__init__()
        layout = kernel_type or ggml_type
        known = ggml_type in GGML_TYPES.values() or (ggml_type in REPACKED_TYPES.values() and kernel_type)
        if not known or layout not in BLOCK_BYTES or in_features % 32 or \
                blocks.shape[1] != in_features // 32 * BLOCK_BYTES[layout] or blocks.dtype != torch.uint8:
            raise ValueError(f"blocks {tuple(blocks.shape)} {blocks.dtype} are not ggml type {ggml_type} rows of "
                             f"{in_features} weights")
        if kernel_type is None:
            blocks, kernel_type = _library().quant_repack(blocks.contiguous(), ggml_type, in_features)
        self.rows, self.kernel_type, self.ggml_type = blocks.contiguous(), kernel_type, ggml_type
        self.bias, self.weight = bias, weight
        self.out_features, self.in_features = blocks.shape[0], in_features

    @classmethod
    def cat_rows(cls, parts: list["QuantLinear"]) -> "QuantLinear | None":
        """The parts as one linear (rows concatenated), or None where their widths differ or their block types do and
        cannot all be written as Q8S (a GGUF file often stores v_proj in another type than q/k: `to_q8s`)."""
        if len({p.in_features for p in parts}) != 1:
            return None
        if len({p.kernel_type for p in parts}) != 1:
            if any(p.kernel_type not in TO_Q8S for p in parts):
                return None
            parts = [cls(to_q8s(p.rows, p.kernel_type), p.ggml_type, p.in_features, p.bias, p.weight, kernel_type=108)
                     for p in parts]
        rows = torch.cat([p.rows for p in parts])
        half = HALF_DTYPES.get(parts[0].kernel_type)
        if half is not None:  # the weight is the rows themselves: a view, not a second copy
            weight = rows.view(half)
        else:
            weight = None if any(p.weight is None for p in parts) else torch.cat([p.weight.detach() for p in parts])
        return cls(rows, parts[0].ggml_type, parts[0].in_features, cat_biases(parts), weight,
                   kernel_type=parts[0].kernel_type)

    def dequantized(self) -> torch.Tensor:
        """W [N, K] fp32 exactly as the kernel reads it."""
        return _library().quant_dequantize(self.rows, self.kernel_type, self.in_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1]
        if (not 0 < rows <= MAX_ROWS or x.device.type != "cpu" or torch.is_grad_enabled()
                or x.dtype not in KERNEL_DTYPES):
            weight = self.weight if self.weight is not None else self.dequantized().to(x.device)
            return F.linear(x, weight.to(x.dtype), None if self.bias is None else self.bias.to(x.dtype))
        y = _library().quant_linear(x.reshape(rows, self.in_features).float().contiguous(), self.rows,
                                    self.kernel_type)  # [rows, N] fp32
        if self.bias is not None:
            y += self.bias
        return y.to(x.dtype).reshape(*x.shape[:-1], self.out_features)


def q8_0(weight: torch.Tensor) -> QuantLinear:
    """A linear over W [N, K] rounded to ggml's Q8_0 blocks (8-bit, one fp16 scale per 32 weights): a quarter of
    fp32's bytes. Not exact, so only for what need not be (the drafter); its `weight` is the rounded W."""
    w = weight.detach().float().cpu().numpy()
    blocks = np.ascontiguousarray(quants.quantize(w, GGMLQuantizationType.Q8_0)).view(np.uint8).reshape(w.shape[0], -1)
    rounded = torch.from_numpy(quants.dequantize(blocks, GGMLQuantizationType.Q8_0).reshape(w.shape).copy())
    return QuantLinear(torch.from_numpy(blocks.copy()), GGML_TYPES["Q8_0"], w.shape[1], weight=rounded)


def f16_rows(weight: torch.Tensor, bias: torch.Tensor | None = None) -> QuantLinear | None:
    """A linear over W [N, K] rounded to fp16, as F16 rows the block kernel reads (fp32 activations and sums): the
    weights fbgemm's fp16 path multiplies by, on a kernel `draft_layers` can call. Not exact, so only for what need
    not be (the drafter); None where K is not a multiple of 32 or W is not an fp32 CPU tensor."""
    w = weight.detach()
    if w.dim() != 2 or w.shape[1] % 32 or w.dtype != torch.float32 or w.device.type != "cpu":
        return None
    return half_linear(w.half(), None if bias is None else bias.detach().float())


def quantize_linears(module: nn.Module) -> int:
    """Replace every fp32 CPU `nn.Linear` inside `module` whose input width is a multiple of 32 by its `q8_0`
    version (bias kept); returns how many were replaced."""
    if not packing_available():
        return 0

    def quantized(lin: nn.Linear) -> QuantLinear | None:
        if lin.in_features % 32 or lin.weight.dtype != torch.float32:
            return None
        quant = q8_0(lin.weight)
        quant.bias = lin.bias
        return quant
    return replace_linears(module, quantized)


FBGEMM = "fbgemm"  # PyTorch's x86 kernels for quantized and fp16-weight linears (AVX2 / AVX-512, VNNI where present)


class DynamicLinear(nn.Module):
    """An inference-only linear on fbgemm (through PyTorch's `quantized` ops) for the drafter, which need not be exact
    and which, at 7-8 rows a draft, the exact block kernel runs far below the CPU's speed:
    'fp16': W rounded to fp16, fp32 activations and sums (the drafter's proposals as with fp32 weights);
    'int8': W rounded to 8 bits per output row, each call's activations to 8 bits (one scale per call), int32 sums.
    At 8 rows on 2 threads of an AMD EPYC (AVX-512): [576 -> 1536] 0.09 ms fp16, 0.05 int8, against 0.13-0.28 with
    q8_0 blocks; the 8192-column draft head 0.13 ms int8 against 0.60. `weight` keeps the fp32 W: calls the ops do
    not take (grad mode, other devices and dtypes) use it."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, kind: str):
        super().__init__()
        w = weight.detach().float().contiguous()
        b = None if bias is None else bias.detach().float()
        if kind == "fp16":
            self.packed = torch.ops.quantized.linear_prepack_fp16(w, b)
        elif kind == "int8":
            scale = (w.abs().amax(1) / 127).clamp(min=1e-12).double()  # [N]: symmetric, per output row
            with warnings.catch_warnings():  # quantized tensors are deprecated; the prepacked op is what we keep
                warnings.simplefilter("ignore")
                q = torch.quantize_per_channel(w, scale, torch.zeros_like(scale, dtype=torch.long), 0, torch.qint8)
            self.packed = torch.ops.quantized.linear_prepack(q, b)
        else:
            raise ValueError(f"kind {kind!r}: fp16 or int8")
        self.kind, self.weight, self.bias = kind, w, b
        self.out_features, self.in_features = w.shape

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() or x.dtype != torch.float32 or x.device.type != "cpu":
            return F.linear(x, self.weight.to(x), None if self.bias is None else self.bias.to(x))
        if self.kind == "fp16":
            return torch.ops.quantized.linear_dynamic_fp16(x, self.packed)
        # reduce_range off: 8-bit activations (on AVX2 without VNNI a pair of products may saturate: a draft's loss)
        return torch.ops.quantized.linear_dynamic(x, self.packed, False)


@functools.cache
def dynamic_available() -> bool:
    """fbgemm's fp16 and int8 linears run here (an x86 CPU with AVX2; PyTorch's CPU build)."""
    if FBGEMM not in torch.backends.quantized.supported_engines:
        return False
    try:  # in inference mode: the ops themselves run (grad mode would take the fp32 fallback)
        x, w = torch.ones(2, 32), torch.ones(8, 32)
        with torch.inference_mode():
            return all(torch.allclose(DynamicLinear(w, None, k)(x), torch.full((2, 8), 32.0), rtol=0.02)
                       for k in ("fp16", "int8"))
    except (RuntimeError, AttributeError, NotImplementedError):
        return False


def drafter_linears(module: nn.Module, kind: str = "fp16") -> int:
    """Replace every fp32 CPU `nn.Linear` inside `module` (a drafter) by its `DynamicLinear` of `kind`; returns how
    many were replaced (0 where fbgemm is not available: see `dynamic_available`)."""
    if not dynamic_available():
        return 0
    return replace_linears(module, lambda lin: DynamicLinear(lin.weight, lin.bias, kind)
                           if lin.weight.dtype == torch.float32 else None)


def kernel_linear(module: nn.Module) -> tuple[torch.Tensor, torch.Tensor, int, int] | None:
    """(weights, bias or an empty tensor, kind, arg) as lean_layers.cpp runs `module`: GGUF blocks (kind 0, arg: the
    ggml type) or fp32 panels (kind 1, arg: N); None for any other linear (PyTorch's, AMX, a `FusedLinear`)."""
    if type(module) is QuantLinear:
        weights, kind, arg = module.rows, 0, module.kernel_type
    elif type(module) is PackedLinear and module.kind == "panel":
        weights, kind, arg = module.packed, 1, module.out_features
    else:
        return None
    bias = torch.empty(0) if module.bias is None else module.bias.detach().float().contiguous()
    return weights, bias, kind, arg


def lean_layers(tensors: list[torch.Tensor], ints: list[int], floats: list[float], sliding: list[int], h: int,
                g: int, d: int, scale: float, softcap: float = 0.0):
    """lean_layers.cpp's LeanLayers over these per-layer weights (its constructor documents the lists)."""
    return _library().LeanLayers(tensors, ints, floats, sliding, h, g, d, scale, softcap)


def draft_layers(fc: tuple, hidden_norm: torch.Tensor, hidden_eps: float, norm: torch.Tensor, norm_eps: float,
                 tensors: list[torch.Tensor], ints: list[int], floats: list[float], h: int, g: int, d: int,
                 scale: float):
    """draft_layers.cpp's DraftLayers (the DFlash drafter's draft pass in one call) over these weights; fc is
    `kernel_linear`'s tuple for the context projection (the constructor documents the lists)."""
    weights, bias, kind, arg = fc
    return _library().DraftLayers([weights, bias], [kind, arg], hidden_norm, hidden_eps, norm, norm_eps, tensors,
                                  ints, floats, h, g, d, scale)


def row_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, allowed: torch.Tensor | None,
                  scale: float, softcap: float = 0.0) -> torch.Tensor:
    """Grouped-query attention, each query row alone over its allowed key columns in cache order (attention.cpp):
    a row's result does not depend on the other rows or on masked columns, so a tree node's output equals the plain
    step's that attends the same keys, bit for bit. q [n, h, d]; keys, values [g, L, d] with contiguous rows (cache
    views are fine); allowed [n, L] bool, or None: causal after the cache (row i sees columns 0 .. L - n + i);
    softcap > 0: each score s soft-capped to softcap · tanh(s / softcap) (Gemma2), 0: not. Returns [n, h, d] fp32."""
    empty = torch.empty(0, dtype=torch.bool)
    return _library().row_attention(q.contiguous(), keys, values, empty if allowed is None else allowed.contiguous(),
                                    scale, softcap)


def _cpu_call(device, fn: Callable) -> Callable | None:
    """fn where logits on `device` can take sample.cpp's one-call path (CPU, the extension built), else None."""
    return fn if torch.device(device).type == "cpu" and packing_available() else None


def sampler(device) -> Callable | None:
    """The one-call draw of sample.cpp for logits on `device`, else None (the caller keeps `accept.sample_token`, the
    reference it is tested against)."""
    return _cpu_call(device, sample_processed)


def greedy_chooser(device) -> Callable | None:
    """The one-call greedy choice of sample.cpp for logits on `device`, else None (the caller keeps
    `accept.target_choices`, the reference it is tested against)."""
    return _cpu_call(device, row_argmax)


def row_argmax(logits: torch.Tensor) -> torch.Tensor:
    """logits [R, V] -> [R] long: each row's first maximal entry (a NaN above every number), as `torch.argmax`;
    fp16/bf16 logits widened to fp32 first (exactly, so the same entries)."""
    return _library().row_argmax(logits.float().contiguous())


def sample_processed(logits: torch.Tensor, params, generator: torch.Generator | None = None) -> int:
    """logits [V] -> one draw from the processed law of `params` (a sampling `accept.SamplingParams`, T > 0), as
    `accept.sample_token` draws: one uniform u from `generator`, the first kept token whose cumulative probability
    exceeds u. sample.cpp documents the law's arithmetic."""
    u = float(torch.rand((), dtype=torch.float64, generator=generator))
    return _library().sample_processed(logits.float().contiguous(), params.temperature, params.top_k,
                                       params.top_p, u)


def processed_law(logits: torch.Tensor, params) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [V] -> (kept tokens [k], their probabilities [k] float64): the law `sample_processed` draws from."""
    return _library().processed_law(logits.float().contiguous(), params.temperature, params.top_k, params.top_p)
