"""Native GGUF weights: the linears of a model loaded from a GGUF file run on the file's own blocks (`QuantLinear`),
so a decoding step reads the 4/8-bit weights as stored instead of their fp32 expansion (SmolLM2-135M Q4_1: 96.6 MB
instead of 538 MB per forward).

Which GGUF tensor feeds which module is transformers' own map (`get_gguf_hf_weights_map`), and the row order its
tensor processor applies on load (Llama's Q/K head permutation) is applied to the block rows: a block holds 32
weights along K, so permuting output rows moves whole rows of blocks. Every replaced weight is checked at load: the
blocks, dequantized as the kernel reads them, must equal the fp32 Parameter transformers built from the same file,
bit for bit, so native and fp32 weights are the same model (only the summation order of the linears differs).
Tensors of other block types keep the fp32 path (one notice line).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
from gguf import GGUFReader
from torch import nn
from transformers.modeling_gguf_pytorch_utils import TENSOR_PROCESSORS, TensorProcessor, get_gguf_hf_weights_map

from caddtree.errors import CaddtreeError
from caddtree.kernels import GGML_TYPES, QuantLinear, packing_available

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


def use_gguf_blocks(model: nn.Module, path: Path) -> dict[str, int]:
    """Replace every linear of `model` (loaded by transformers from the GGUF file at `path`, fp32, CPU) whose weight
    the file stores in a supported block type by a `QuantLinear` over those blocks. Returns {ggml type name: count}
    of replaced linears, plus 'fp32' for those left as they were."""
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
    for t in GGUFReader(str(path)).tensors:
        hf = gguf_to_hf.get(t.name)
        if hf not in sites:
            continue
        kind = t.tensor_type.name
        if kind not in GGML_TYPES:
            counts["fp32"] = counts.get("fp32", 0) + len(sites[hf])
            continue
        rows, k = int(t.shape[1]) if len(t.shape) > 1 else 1, int(t.shape[0])
        blocks = block_rows(t, _row_order(processor, t.name, rows))
        for parent, attr, linear in sites[hf]:
            quant = QuantLinear(blocks, GGML_TYPES[kind], k, linear.bias, linear.weight)
            if not torch.equal(quant.dequantized(), linear.weight.detach()):
                raise CaddtreeError(f"GGUF tensor {t.name} ({kind}) does not dequantize to the weights transformers "
                                    f"loaded for {hf}: use --weights fp32 (and report this file)")
            setattr(parent, attr, quant)
            counts[kind] = counts.get(kind, 0) + 1
    if counts.get("fp32"):
        print(f"caddtree: {counts['fp32']} linear(s) of {path.name} use block types the native kernel does not read "
              f"(it reads {', '.join(GGML_TYPES)}); they run in fp32", file=sys.stderr)
    return counts
