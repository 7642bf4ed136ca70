"""Native GGUF weights: the linears of a model loaded from a GGUF file run on the file's own blocks (`QuantLinear`),
so a decoding step reads the 4-8-bit weights instead of their fp32 expansion (SmolLM2-135M Q4_1: 96.6 MB instead of
538 MB per forward).

Which GGUF tensor feeds which module is transformers' own map (`get_gguf_hf_weights_map`), and the row order its
tensor processor applies on load (Llama's Q/K head permutation) is applied to the block rows: a block holds 32
weights along K, so permuting output rows moves whole rows of blocks. Every replaced weight is checked at load: the
blocks, dequantized as the kernel reads them, must equal the fp32 Parameter transformers built from the same file,
bit for bit, so native and fp32 weights are the same model (only the summation order of the linears differs).
Q4_K, Q5_0, Q5_1, Q5_K and Q6_K are repacked once at load into a layout the kernel reads (`kernel_blocks`): their
weights are d·q + m per 16 or 32 weights with d·q exact in fp32 (d a fp16 scale times a small integer scale, q at
most 6 bits), so fp32 d, m and one FMA (or the exact product) per weight give gguf-py's values exactly. Tensors of
other block types (Q2_K, Q3_K, the IQ types) keep the fp32 path (one notice line).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFReader
from gguf.quants import Q4_K
from torch import nn
from transformers.modeling_gguf_pytorch_utils import TENSOR_PROCESSORS, TensorProcessor, get_gguf_hf_weights_map

from caddtree.errors import CaddtreeError
from caddtree.kernels import GGML_TYPES, REPACKED_TYPES, QuantLinear, packing_available

NATIVE_TYPES = {**GGML_TYPES, **REPACKED_TYPES}  # every GGUF type a linear runs natively: name -> ggml id

# model_type -> transformers' tensor processor: Llama's permutes Q/K rows (moved here as whole block rows), Gemma's
# shifts the norms llama.cpp stores as 1 + w (not linears), Phi3's fused attn_qkv / ffn_up load as stored
ARCH = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "gemma2": "gemma2",
        "gemma3_text": "gemma3", "phi3": "phi3"}


def _row_order(processor: TensorProcessor, gguf_name: str, rows: int) -> np.ndarray:
    """The permutation of output rows transformers applies to this tensor on load (identity for most)."""
    index = np.arange(rows, dtype=np.float64)[:, None]  # [N, 1]: the processor permutes rows, whatever they hold
    out = processor.process(weights=index, name=gguf_name).weights
    order = np.asarray(out).reshape(-1).astype(np.int64)
    if order.shape != (rows,) or not np.array_equal(np.sort(order), np.arange(rows)):
        raise CaddtreeError(f"GGUF tensor {gguf_name}: transformers transforms it beyond a row permutation; "
                            f"use --weights fp32")
    return order


def block_rows(tensor, order: np.ndarray) -> torch.Tensor:
    """A GGUF tensor's rows as [N, K/32 · bytes per block] uint8 blocks, in `order`, read into memory. gguf-py hands
    F16 tensors over as float16 arrays [N, K] and block types as bytes: both are the stored bytes."""
    data = np.asarray(tensor.data).view(np.uint8).reshape(len(order), -1)
    return torch.from_numpy(np.ascontiguousarray(data[order]))


def _f16(b: np.ndarray, at: int) -> np.ndarray:
    """[n, 1] fp32: the fp16 at byte `at` of each block (row of b)."""
    return np.ascontiguousarray(b[:, at:at + 2]).view(np.float16).astype(np.float32)


def _nibbles(qs: np.ndarray, chunk: int) -> np.ndarray:
    """[n, bytes] -> [n, 2 · bytes]: per chunk of `chunk` bytes its low nibbles, then its high ones (ggml's order)."""
    q = qs.reshape(qs.shape[0], -1, 1, chunk) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
    return (q & np.uint8(0x0F)).reshape(qs.shape[0], -1)


def _k_scales(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K / Q5_K super-blocks -> (d·sc, dmin·min) [n, 8], one per 32 weights, as gguf-py computes them (exact)."""
    sc, mn = Q4_K.get_scale_min(np.ascontiguousarray(b[:, 4:16]))
    return _f16(b, 0) * sc.astype(np.float32), _f16(b, 2) * mn.astype(np.float32)


def _q4_1s(d: np.ndarray, m: np.ndarray, q: np.ndarray) -> np.ndarray:
    """d, m [n] fp32 and q [n, 32] in 0..15 -> [n, 24] Q4_1S blocks (w = d·q + m; byte j = q[j] | q[j + 16] << 4)."""
    head = np.stack([d, m], -1).astype(np.float32).view(np.uint8)
    return np.concatenate([head, (q[:, :16] | (q[:, 16:] << 4)).astype(np.uint8)], 1)


def _q5s(d: np.ndarray, m: np.ndarray | None, q: np.ndarray) -> np.ndarray:
    """d [n] fp32, m [n] or None, q [n, 32] in 0..31 -> [n, 28] Q5_1S blocks (w = fma(q, d, m)) or, without m, [n, 24]
    Q5_0S (w = d·(q - 16)): the low nibbles as Q4_1S holds them, then a little-endian uint32 of the high bits."""
    head = np.stack([d] if m is None else [d, m], -1).astype(np.float32).view(np.uint8)
    high = np.packbits((q >> 4).astype(np.uint8), axis=1, bitorder="little")  # [n, 4]: bit j = element j's
    return np.concatenate([head, ((q[:, :16] & 15) | ((q[:, 16:] & 15) << 4)).astype(np.uint8), high], 1)


def _q8s(d: np.ndarray, m: np.ndarray, q: np.ndarray) -> np.ndarray:
    """d, m [n, 2] fp32 (elements 0..15, 16..31) and q [n, 32] int8 -> [n, 48] Q8S blocks (w = fma(q, d, m))."""
    head = np.concatenate([d, m], -1).astype(np.float32).view(np.uint8)
    return np.concatenate([head, q.astype(np.int8).view(np.uint8)], 1)


def kernel_blocks(blocks: torch.Tensor, kind: str, k: int) -> tuple[torch.Tensor, int]:
    """blocks [N, row bytes] uint8 of a REPACKED_TYPES tensor as stored -> (rows [N, K/32 · bytes] in the kernel's
    layout, its type): Q4_K -> Q4_1S (d·sc, -dmin·min, nibbles), Q5_0 -> Q5_0S, Q5_1 -> Q5_1S, Q5_K -> Q5_1S (d·sc,
    -dmin·min), Q6_K -> Q8S (d·sc per 16 weights, q - 32, m = -0.0 so that fma(q, d, -0.0) = d·q to the sign of
    zero). The unpacking follows gguf-py's dequantize step for step; `use_gguf_blocks` checks every converted tensor
    against transformers' weights bit for bit."""
    size, nbytes = GGML_QUANT_SIZES[GGMLQuantizationType[kind]]
    n = blocks.shape[0] * k // size
    b = blocks.numpy().reshape(n, nbytes)
    if kind == "Q4_K":
        d, dm = _k_scales(b)
        rows, layout = _q4_1s(d.reshape(-1), -dm.reshape(-1), _nibbles(b[:, 16:], 32).reshape(-1, 32)), 103
    elif kind in ("Q5_0", "Q5_1"):  # d (fp16), [m (fp16)], 32 high bits, 16 bytes of nibbles
        at = 2 if kind == "Q5_0" else 4
        high = (np.ascontiguousarray(b[:, at:at + 4]).view(np.uint32) >> np.arange(32, dtype=np.uint32)) & 1
        q = _nibbles(b[:, at + 4:], 16) | (high.astype(np.uint8) << 4)  # [n, 32] in 0..31
        rows = _q5s(_f16(b, 0)[:, 0], None if kind == "Q5_0" else _f16(b, 2)[:, 0], q)
        layout = 106 if kind == "Q5_0" else 107
    elif kind == "Q5_K":  # d, dmin, 12 B of scales, 32 B of high bits, 128 B of nibbles
        d, dm = _k_scales(b)
        high = (b[:, 16:48].reshape(n, 1, 1, 32) >> np.arange(8, dtype=np.uint8).reshape(1, 1, 8, 1)) & 1
        q = (_nibbles(b[:, 48:], 32) | (high.reshape(n, -1) << 4)).reshape(-1, 32)
        rows, layout = _q5s(d.reshape(-1), -dm.reshape(-1), q), 107
    elif kind == "Q6_K":  # 128 B of low nibbles, 64 B of 2-bit highs, 16 int8 scales, d
        low = _nibbles(b[:, :128], 64)
        high = (b[:, 128:192].reshape(n, -1, 1, 32) >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)) & 3
        q = (low | (high.reshape(n, -1) << 4)).astype(np.int8) - np.int8(32)
        d = (_f16(b, 208) * b[:, 192:208].view(np.int8).astype(np.float32)).reshape(-1, 2)  # per 16 weights
        rows, layout = _q8s(d, np.full_like(d, -0.0), q.reshape(-1, 32)), 108
    else:
        raise ValueError(f"{kind} is not one of {sorted(REPACKED_TYPES)}")
    return torch.from_numpy(rows.reshape(blocks.shape[0], -1)), layout


def _linear_targets(model: nn.Module) -> dict[str, list[tuple[nn.Module, str, nn.Module]]]:
    """HF weight name -> the (parent, attribute, module) sites whose linear reads that weight (the LM head is a site
    of the embedding's weight when the two are tied)."""
    sites: dict[str, list] = {}
    for pname, parent in model.named_modules():
        for cname, child in parent.named_children():
            if type(child) is nn.Linear:
                sites.setdefault(f"{pname}.{cname}.weight".lstrip("."), []).append((parent, cname, child))
    head, emb = model.get_output_embeddings(), model.get_input_embeddings()
    if head is not None and emb is not None and head.weight is emb.weight:  # tied: the head reads token_embd
        emb_name = next(n for n, m in model.named_modules() if m is emb)
        head_sites = [s for k, v in sites.items() for s in v if s[2] is head]
        sites.setdefault(f"{emb_name}.weight", []).extend(head_sites)
    return sites


def use_gguf_blocks(model: nn.Module, path: Path, reader: GGUFReader | None = None) -> dict[str, int]:
    """Replace every linear of `model` (loaded by transformers from the GGUF file at `path`, fp32, CPU) whose weight
    the file stores in a supported block type by a `QuantLinear` over those blocks. Returns {ggml type name: count}
    of replaced linears, plus 'fp32' for those left as they were. reader: the file already opened by gguf-py (else
    opened here)."""
    if not packing_available():
        raise CaddtreeError("--weights native needs the CPU kernels, which could not be built here (a C++ compiler "
                            "and ninja): use --weights fp32")
    model_type = model.config.model_type
    if model_type not in ARCH:
        raise CaddtreeError(f"--weights native supports GGUF files of {sorted(ARCH)} models, not {model_type!r}: "
                            f"use --weights fp32")
    processor = TENSOR_PROCESSORS.get(ARCH[model_type], TensorProcessor)(config=model.config.to_dict())
    gguf_to_hf = get_gguf_hf_weights_map(model, processor)
    sites = _linear_targets(model)
    counts: dict[str, int] = {}
    for t in (reader or GGUFReader(str(path))).tensors:
        hf = gguf_to_hf.get(t.name)
        if hf not in sites:
            continue
        kind = t.tensor_type.name
        if kind not in NATIVE_TYPES:
            counts["fp32"] = counts.get("fp32", 0) + len(sites[hf])
            continue
        rows, k = int(t.shape[1]) if len(t.shape) > 1 else 1, int(t.shape[0])
        blocks, layout = block_rows(t, _row_order(processor, t.name, rows)), None
        if kind in REPACKED_TYPES:
            blocks, layout = kernel_blocks(blocks, kind, k)
        for parent, attr, linear in sites[hf]:
            quant = QuantLinear(blocks, NATIVE_TYPES[kind], k, linear.bias, linear.weight, layout)
            if not torch.equal(quant.dequantized(), linear.weight.detach()):
                raise CaddtreeError(f"GGUF tensor {t.name} ({kind}) does not dequantize to the weights transformers "
                                    f"loaded for {hf}: use --weights fp32 (and report this file)")
            setattr(parent, attr, quant)
            counts[kind] = counts.get(kind, 0) + 1
    if counts.get("fp32"):
        print(f"caddtree: {counts['fp32']} linear(s) of {path.name} use block types the native kernel does not read "
              f"(it reads {', '.join(NATIVE_TYPES)}); they run in fp32", file=sys.stderr)
    return counts
