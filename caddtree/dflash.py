"""DFlash-style block-diffusion drafter (Llama-family layers in the target's layout): model, inference wrapper with a
context cache, save/load.

One forward drafts a block [root, MASK x (B-1)] at absolute positions ℓ..ℓ+B-1 (root = last committed token, at ℓ) and
returns B-1 per-position distributions. Context = target hidden states of m target layers at positions < ℓ, fused
once per token by Linear(m*H -> H) + RMSNorm, and injected as extra keys/values in every draft layer through that
layer's own k/v projections. Queries come from the block only; the block attends to itself bidirectionally.
Embedding and LM head are the target's (frozen, shared, never saved); the mask embedding is the drafter's own vector,
not a token id, so no real output token can be mistaken for it.

Shapes: H hidden, h heads, g KV heads, d head dim, A blocks, B block size, C context tokens, F = m*H_target.
"""
from __future__ import annotations

import copy
import functools
import json
import math
import os
import sys
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from caddtree.accept import draft_log_probs
from caddtree.drafter import (Drafter, OnlineCalibration, calibration_keep, for_setting, settings_digest,
                              shrink_to_uniform)
from caddtree.errors import CaddtreeError
from caddtree.files import atomic_write
from caddtree.kernels import (DynamicLinear, PackedLinear, draft_layers, drafter_linears, dynamic_available, f16_rows,
                              kernel_linear, pack_linears, packing_available, q8_0, quantize_linears)
from caddtree.kvcache import room_for

# the draft pass in the cost-profile key of a native target's drafter (`DFlashDrafter.fingerprint`): "p2", one pass
# per draft (`Layer.draft_forward`), ~1 ms a draft cheaper than the module path profiles before it priced; "p3", the
# pass in one C++ call where the kernels are built (`draft_pass`), ~0.8 ms cheaper again
DRAFT_PASS = "p3"
NEG = -1e9  # additive mask value (finite: a fully masked row cannot occur, but -inf would turn it into NaN)


def default_target_layers(n_layers: int, m: int = 3) -> list[int]:
    """DFlash's evenly spaced target layer ids: round(1 + i*(N-4)/(m-1)), i < m (N=30, m=3 -> [1, 14, 27])."""
    if m == 1:
        return [n_layers - 2]
    return [int(math.floor(1 + i * (n_layers - 4) / (m - 1) + 0.5)) for i in range(m)]


@dataclass
class DFlashConfig:
    hidden_size: int = 576
    intermediate_size: int = 1536
    num_layers: int = 1
    num_heads: int = 9
    num_kv_heads: int = 3
    head_dim: int = 64
    rms_norm_eps: float = 1e-5
    rope_theta: float = 100000.0
    vocab_size: int = 49152
    block_size: int = 8
    target_layers: list[int] = field(default_factory=lambda: [1, 14, 27])
    target_name: str = ""
    target_fingerprint: str = ""
    # the model the target's weights are a copy of (`Target.model_id`): another file of it (another quantisation) may
    # load the drafter; not in the cost profile's key (`digest_fields`), which the fingerprint already pins
    target_model: str = ""
    target_hidden_size: int = 576
    target_num_layers: int = 30
    draft_vocab_size: int = 0  # K > 0: the LM head is restricted to K frequent target tokens (`vocab_map`), 0 = all
    # the draft layers' layout follows the target's (`target_layout`): q/k/v biases (Qwen2), per-head RMSNorms of
    # queries and keys before RoPE (Qwen3), o_proj and MLP biases (Llama's attention_bias / mlp_bias)
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    # a target whose RoPE scales its frequencies (llama3, yarn, ...): its own inverse frequencies [d/2] and the factor
    # its cos/sin are multiplied by (`target_rope`); None: θ^(-2i/d) from rope_theta
    rope_inv_freq: list[float] | None = None
    rope_scale: float = 1.0

    def digest_fields(self) -> dict:
        """The fields that name this architecture in cost-profile keys: the layout and RoPE fields only where set,
        so a Llama-shaped drafter keeps the key it had before they existed (and its profiles)."""
        return {k: v for k, v in asdict(self).items()
                if k != "target_model" and (k not in OPTIONAL_FIELDS or v != OPTIONAL_FIELDS[k])}

    @property
    def rope_freqs(self) -> float | tuple[float, ...]:
        """What `rope` takes: the target's inverse frequencies where it scales them, else the base θ."""
        return tuple(self.rope_inv_freq) if self.rope_inv_freq else self.rope_theta

    @classmethod
    def for_target(cls, target, num_layers: int = 1, block_size: int = 8, m: int = 3,
                   draft_vocab_size: int = 0) -> "DFlashConfig":
        c = target.config
        rope = getattr(c, "rope_parameters", None) or {}
        theta = rope.get("rope_theta", getattr(c, "rope_theta", 10000.0))
        heads = c.num_attention_heads
        return cls(hidden_size=c.hidden_size, intermediate_size=c.intermediate_size, num_layers=num_layers,
                   num_heads=heads, num_kv_heads=getattr(c, "num_key_value_heads", heads),
                   head_dim=getattr(c, "head_dim", None) or c.hidden_size // heads, rms_norm_eps=c.rms_norm_eps,
                   rope_theta=float(theta), vocab_size=target.vocab_size, block_size=block_size,
                   target_layers=default_target_layers(c.num_hidden_layers, m), target_name=target.name,
                   target_fingerprint=target.fingerprint, target_model=target.model_id,
                   target_hidden_size=c.hidden_size, target_num_layers=c.num_hidden_layers,
                   draft_vocab_size=draft_vocab_size,
                   **target_layout(target.model), **target_rope(target.model, rope))


# the fields added after drafters had been profiled, each with its default (read off the dataclass): the profile key
# names them only where they differ from it (`DFlashConfig.digest_fields`)
OPTIONAL_FIELDS = {f.name: f.default for f in fields(DFlashConfig)
                   if f.name in ("qkv_bias", "o_bias", "mlp_bias", "qk_norm", "rope_inv_freq", "rope_scale")}


def target_rope(model: nn.Module, rope: dict) -> dict:
    """The RoPE fields of DFlashConfig for a target whose rotary module scales its frequencies (rope_type
    llama3, yarn, linear, ...): its inv_freq and attention_scaling, so a draft layer copied from the target rotates as
    the target does. Nothing for the default type (θ alone says it), for types whose frequencies follow the length
    (dynamic, longrope), and where the module is not one table of d/2 frequencies (partial rotary, per-layer-type
    rotary modules)."""
    kind, body = rope.get("rope_type", "default"), getattr(model, "model", None)
    inv = getattr(getattr(body, "rotary_emb", None), "inv_freq", None)
    if kind in ("default", "dynamic", "longrope") or not isinstance(inv, torch.Tensor) or inv.dim() != 1:
        return {}
    scale = float(getattr(body.rotary_emb, "attention_scaling", 1.0))
    return {"rope_inv_freq": inv.float().tolist(), "rope_scale": scale}


def target_layout(model: nn.Module) -> dict:
    """The layout flags (DFlashConfig's) of a target's last decoder layer, read off its modules: which projections
    carry biases and whether queries and keys are normed per head. Fused projections (Phi3's qkv_proj,
    gate_up_proj) count as their parts. None for a model without Llama-family layers (their defaults)."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    if not layers or not hasattr(layers[-1], "self_attn") or not hasattr(layers[-1], "mlp"):
        return {}
    attn, mlp = layers[-1].self_attn, layers[-1].mlp

    def has_bias(module, *names) -> bool:
        return any(getattr(getattr(module, n, None), "bias", None) is not None for n in names)
    return {"qkv_bias": has_bias(attn, "q_proj", "qkv_proj"), "o_bias": has_bias(attn, "o_proj"),
            "mlp_bias": has_bias(mlp, "gate_proj", "gate_up_proj", "down_proj"),
            "qk_norm": hasattr(attn, "q_norm") and hasattr(attn, "k_norm")}


def split_fused(sd: dict, c: DFlashConfig) -> dict:
    """A target layer's state dict under the drafter's names: self_attn. / mlp. dropped, and fused projections
    (Phi3's qkv_proj [(h + 2g)·d, H] and gate_up_proj [2I, H], gate first) split row-wise into their parts."""
    out = {k.replace("self_attn.", "").replace("mlp.", ""): v for k, v in sd.items()}
    q, kv = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
    for fused, parts, sizes in (("qkv_proj", ("q_proj", "k_proj", "v_proj"), (q, kv, kv)),
                                ("gate_up_proj", ("gate_proj", "up_proj"), (c.intermediate_size,) * 2)):
        for kind in ("weight", "bias"):
            t = out.get(f"{fused}.{kind}")
            if t is not None and t.shape[0] == sum(sizes):
                del out[f"{fused}.{kind}"]
                out.update({f"{p}.{kind}": v for p, v in zip(parts, t.split(sizes))})
    return out


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


@functools.lru_cache(maxsize=16)
def _rope_table(freqs: float | tuple, d: int, n: int, device: torch.device, dtype: torch.dtype, scale: float = 1.0):
    """cos, sin [n, d] for positions 0..n-1; freqs: the base θ (inverse frequencies θ^(-2i/d)) or the d/2 inverse
    frequencies themselves, cos/sin times `scale` (HF's attention_scaling) where it is not 1. A table, because
    computing them per call was ~0.2 ms of each of the drafter's rope calls on CPU (a dozen small ops), several
    calls per round."""
    if isinstance(freqs, tuple):
        inv = torch.tensor(freqs, device=device, dtype=torch.float32)  # [d/2]
    else:
        inv = 1.0 / (freqs ** (torch.arange(0, d, 2, device=device, dtype=torch.float32) / d))  # [d/2]
    ang = torch.arange(n, device=device, dtype=torch.float32)[:, None] * inv[None]  # [n, d/2]
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)
    if scale != 1.0:
        cos, sin = cos * scale, sin * scale
    return cos.to(dtype), sin.to(dtype)


def rope_rows(pos: torch.Tensor, d: int, freqs: float | tuple, device, dtype,
              scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """pos [n] long -> cos, sin [n, d] at those absolute positions (from the cached table; freqs as `_rope_table`)."""
    size = 1 << max(12, int(pos.max()).bit_length()) if pos.numel() else 1 << 12  # > every position, grows by 2x
    cos, sin = _rope_table(freqs if isinstance(freqs, tuple) else float(freqs), d, size, device, dtype, scale)
    return cos[pos], sin[pos]


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [..., n, d] rotated by cos, sin [n, d] (HF Llama rotate-half convention)."""
    d = x.shape[-1]
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def rope(x: torch.Tensor, pos: torch.Tensor, freqs: float | tuple, scale: float = 1.0) -> torch.Tensor:
    """x [..., n, d], pos [n] long -> x rotated at absolute positions (HF Llama rotate-half convention)."""
    return rotate(x, *rope_rows(pos, x.shape[-1], freqs, x.device, x.dtype, scale))


class Layer(nn.Module):
    """A Llama-family decoder layer whose attention also sees the context K/V; the parameter names of HF's
    LlamaDecoderLayer (self_attn. and mlp. dropped), with the biases and the per-head q/k norms (Qwen3's) that the
    config's layout flags ask for."""

    def __init__(self, c: DFlashConfig):
        super().__init__()
        self.c = c
        H, h, g, d = c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim
        self.input_layernorm = RMSNorm(H, c.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(H, c.rms_norm_eps)
        self.q_proj, self.o_proj = nn.Linear(H, h * d, bias=c.qkv_bias), nn.Linear(h * d, H, bias=c.o_bias)
        self.k_proj, self.v_proj = nn.Linear(H, g * d, bias=c.qkv_bias), nn.Linear(H, g * d, bias=c.qkv_bias)
        if c.qk_norm:  # over each head's d features, before RoPE
            self.q_norm, self.k_norm = RMSNorm(d, c.rms_norm_eps), RMSNorm(d, c.rms_norm_eps)
        self.gate_proj = nn.Linear(H, c.intermediate_size, bias=c.mlp_bias)
        self.up_proj = nn.Linear(H, c.intermediate_size, bias=c.mlp_bias)
        self.down_proj = nn.Linear(c.intermediate_size, H, bias=c.mlp_bias)

    def heads(self, proj: nn.Linear, x: torch.Tensor, n: int, norm: str) -> torch.Tensor:
        """x [R, H] -> [n, R, d]: one projection split into n heads, normed per head where the layout says."""
        y = proj(x).view(x.shape[0], n, self.c.head_dim)
        if self.c.qk_norm:
            y = getattr(self, norm)(y)
        return y.transpose(0, 1)

    def context_kv(self, ctx: torch.Tensor, pos: torch.Tensor):
        """ctx [C, H] fused context, pos [C] -> k, v [g, C, d] (k rotated)."""
        d = self.c.head_dim
        return self.rotated_kv(ctx, *rope_rows(pos, d, self.c.rope_freqs, ctx.device, ctx.dtype, self.c.rope_scale))

    def rotated_kv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """x [R, H] normed rows, cos/sin [R, d] their rotation -> k, v [g, R, d] (k rotated)."""
        g, d = self.c.num_kv_heads, self.c.head_dim
        return rotate(self.heads(self.k_proj, x, g, "k_norm"), cos, sin), self.v_proj(x).view(-1, g, d).transpose(0, 1)

    def draft_forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, k_buf: torch.Tensor,
                      v_buf: torch.Tensor, C: int, ctx: torch.Tensor | None = None) -> torch.Tensor:
        """Inference on one block: x [B, H]; ctx [k, H] the fused context rows new since the last call (or None);
        cos/sin [k + B, d] the rotation of positions C..C+k+B-1; k_buf/v_buf [g, >= C + k + B, d] this layer's
        context K/V in their first C rows -> [B, H]. The new rows' K/V go to rows C..C+k-1 (kept: the context grows)
        and the block's to the B rows after (scratch: overwritten by the next call), both from one projection call,
        and one fused attention reads all C + k + B rows, since a block sees its whole context and itself in both
        directions. Equal to `context_kv` + `forward` on A = 1 without a mask, to float order (tests/test_dflash.py),
        in fewer calls: no separate projection of the context rows, no score/softmax/value matmuls of their own."""
        B, h, d = x.shape[0], self.c.num_heads, self.c.head_dim
        new = 0 if ctx is None else ctx.shape[0]
        xn = self.input_layernorm(x)
        rows = xn if ctx is None else torch.cat([ctx, xn])  # [k + B, H]: the new context rows, then the block's
        k_buf[:, C:C + new + B], v_buf[:, C:C + new + B] = self.rotated_kv(rows, cos, sin)
        q = rotate(self.heads(self.q_proj, xn, h, "q_norm"), cos[new:], sin[new:])  # [h, B, d]
        o = F.scaled_dot_product_attention(q[None], k_buf[None, :, :C + new + B], v_buf[None, :, :C + new + B],
                                           enable_gqa=True)  # [1, h, B, d]
        x = x + self.o_proj(o[0].transpose(0, 1).reshape(B, h * d))
        xn = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(xn)) * self.up_proj(xn))

    def forward(self, x, pos, k_ctx, v_ctx, ctx_mask=None):
        """x [A, B, H] block hidden, pos [A, B], k_ctx/v_ctx [g, C, d], ctx_mask [A, C] additive or None -> [A, B, H]."""
        c = self.c
        A, B, _ = x.shape
        h, g, d = c.num_heads, c.num_kv_heads, c.head_dim
        xn = self.input_layernorm(x)
        cos, sin = rope_rows(pos.reshape(-1), d, c.rope_freqs, x.device, x.dtype, c.rope_scale)  # [A·B, d], q and k
        xr = xn.reshape(A * B, -1)
        q = rotate(self.heads(self.q_proj, xr, h, "q_norm"), cos, sin).view(h, A, B, d)
        kb = rotate(self.heads(self.k_proj, xr, g, "k_norm"), cos, sin).view(g, A, B, d)
        vb = self.v_proj(xn).view(A * B, g, d).transpose(0, 1).view(g, A, B, d)
        r = h // g  # GQA: query head i uses KV head i // r, so the r heads of a group share one matmul (no K/V copies)
        C = k_ctx.shape[1]
        scale = d ** -0.5
        s_ctx = torch.matmul(q.reshape(g, r * A * B, d), k_ctx.transpose(1, 2)).view(h, A, B, C) * scale  # [h, A, B, C]
        if ctx_mask is not None:
            s_ctx = s_ctx + ctx_mask[None, :, None, :]
        q5 = q.reshape(g, r, A, B, d)
        s_blk = torch.matmul(q5, kb[:, None].transpose(-1, -2)).view(h, A, B, B) * scale  # bidirectional in its block
        p = torch.softmax(torch.cat([s_ctx, s_blk], -1), -1)  # [h, A, B, C + B]
        o = (torch.matmul(p[..., :C].reshape(g, r * A * B, C), v_ctx).view(h, A, B, d)
             + torch.matmul(p[..., C:].reshape(g, r, A, B, B), vb[:, None]).view(h, A, B, d))
        x = x + self.o_proj(o.permute(1, 2, 0, 3).reshape(A, B, h * d))
        xn = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(xn)) * self.up_proj(xn))


class DFlashModel(nn.Module):
    """The drafter's own weights. The target's embedding/LM head are bound with `bind` and never saved."""

    def __init__(self, c: DFlashConfig):
        super().__init__()
        self.c = c
        self.fc = nn.Linear(len(c.target_layers) * c.target_hidden_size, c.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.layers = nn.ModuleList(Layer(c) for _ in range(c.num_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mask_embedding = nn.Parameter(torch.zeros(c.hidden_size))
        if c.draft_vocab_size:  # draft token j is target token vocab_map[j] (saved with the drafter)
            self.register_buffer("vocab_map", torch.arange(c.draft_vocab_size))
        self._shared = {}  # "embed": [V, H], "head": [K or V, H]: the target's frozen tensors (not parameters here)

    def bind(self, target) -> "DFlashModel":
        """Attach the target's embedding and LM head (call again after loading or changing `vocab_map`)."""
        head = target.model.get_output_embeddings().weight.detach()
        if self.c.draft_vocab_size:
            head = head[self.vocab_map.to(head.device)]
        self._shared = {"embed": target.model.get_input_embeddings().weight.detach(), "head": head}
        return self

    def set_vocab(self, token_ids: torch.Tensor, target) -> None:
        """Restrict the drafter's output to `token_ids` [K] (e.g. the K most frequent response tokens)."""
        self.vocab_map.copy_(token_ids.to(self.vocab_map))
        self.bind(target)

    def label_index(self, tokens: torch.Tensor) -> torch.Tensor:
        """Target token ids -> draft vocabulary index, -1 where the token is outside it."""
        if not self.c.draft_vocab_size:
            return tokens
        inv = torch.full((self.c.vocab_size,), -1, dtype=torch.long, device=tokens.device)
        inv[self.vocab_map.to(tokens.device)] = torch.arange(self.c.draft_vocab_size, device=tokens.device)
        return inv[tokens]

    def init_from_target(self, target) -> None:
        """Start from the target's last layers and final norm, and the mean embedding as mask. The draft layers take
        the target layer's layout (`target_layout`: Llama, Mistral, Qwen2's q/k/v biases, Qwen3's q/k norms) and
        Phi3's fused projections split into their parts (qkv_proj -> q, k, v; gate_up_proj -> gate, up); every
        tensor must then land on a drafter tensor of its shape, else a one-line refusal naming what differs, never
        a partial copy. Gemma2/3 are refused: their norms scale by 1 + w and their MLP is GELU, so their weights
        would describe a different function in these layers."""
        family = target.config.model_type
        if family.startswith("gemma"):
            raise CaddtreeError(f"--init target: a {family} layer does not map onto the drafter's Llama-family layers "
                                f"(norms scaled by 1 + w, a GELU MLP, extra norms): use --init random")
        c, tl = self.c, target.model.model.layers
        for i, layer in enumerate(self.layers):
            sd = split_fused(tl[len(tl) - len(self.layers) + i].state_dict(), c)
            own = layer.state_dict()
            extra, missing = sorted(set(sd) - set(own)), sorted(set(own) - set(sd))
            shapes = [k for k in set(sd) & set(own) if sd[k].shape != own[k].shape]
            if extra or missing or shapes:
                what = (f"target weights the drafter has no place for: {', '.join(extra[:3])}" if extra else
                        f"drafter weights the target lacks: {', '.join(missing[:3])}" if missing else
                        f"shapes differ: {', '.join(shapes[:3])}")
                raise CaddtreeError(f"--init target: a {family} layer does not map onto the drafter's layers "
                                    f"({what}): use --init random")
            layer.load_state_dict(sd)
        self.norm.weight.data.copy_(target.model.model.norm.weight.data)
        with torch.no_grad():
            self.mask_embedding.copy_(self._shared["embed"].mean(0))

    def fuse(self, feats: torch.Tensor) -> torch.Tensor:
        """feats [C, F] target features -> [C, H] context, computed once per token."""
        return self.hidden_norm(self.fc(feats.to(self.fc.weight.dtype)))

    def block_hidden(self, roots, pos, kv_ctx, ctx_mask=None):
        """roots [A] root token ids, pos [A, B] positions, kv_ctx per layer (k, v) [g, C, d] -> [A, B, H] normed."""
        A, B = pos.shape
        emb = self._shared["embed"]
        x = torch.cat([emb[roots][:, None].to(self.mask_embedding.dtype),
                       self.mask_embedding.expand(A, B - 1, -1)], 1)  # [A, B, H]
        for layer, (k, v) in zip(self.layers, kv_ctx):
            x = layer(x, pos, k, v, ctx_mask)
        return self.norm(x)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """h [..., H] -> [..., K or V], in the head's dtype (the target's: a bf16 target's head is not copied to
        fp32 on every call)."""
        head = self._shared["head"]
        return F.linear(h.to(head.dtype), head)

    def full_log_probs(self, logits: torch.Tensor, eps: float = 1e-6, keep: torch.Tensor | None = None
                       ) -> torch.Tensor:
        """[L, K or V] logits -> [L, V] log-probs over the target vocabulary (mass eps on tokens outside K).
        keep [L]: each row mixed with the uniform law (`drafter.shrink_to_uniform`), computed on the K columns and one
        shared outside value, not on all V."""
        lp = torch.log_softmax(logits.float(), -1)
        V, K = self.c.vocab_size, self.c.draft_vocab_size
        if not K:
            return lp if keep is None else shrink_to_uniform(lp, keep, V)
        inside = lp + math.log1p(-eps)  # [L, K]
        outside = torch.full((lp.shape[0], 1), math.log(eps / max(1, V - K)), device=lp.device)  # [L, 1]
        if keep is not None:
            inside, outside = shrink_to_uniform(inside, keep, V), shrink_to_uniform(outside, keep, V)
        out = outside.expand(-1, V).clone()  # [L, V]
        out[:, self.vocab_map.to(lp.device)] = inside
        return out

    def train_forward(self, tokens, feats, anchors):
        """Training on one sequence: tokens [T], feats [T, F], anchors [A] (root positions) -> logits [A, B-1, V].

        Block a sits at positions anchor..anchor+B-1 and sees context positions < anchor only (block isolation is
        structural: a block's keys are its own B tokens plus the shared context)."""
        B = self.c.block_size
        C = int(anchors.max())  # context positions 0..C-1 suffice for every block
        ctx = self.fuse(feats[:C])  # [C, H]
        cpos = torch.arange(C, device=tokens.device)
        ctx_mask = torch.zeros(len(anchors), C, device=tokens.device, dtype=ctx.dtype)
        ctx_mask.masked_fill_(cpos[None] >= anchors[:, None], NEG)  # [A, C]
        kv = [layer.context_kv(ctx, cpos) for layer in self.layers]
        pos = anchors[:, None] + torch.arange(B, device=tokens.device)[None]  # [A, B]
        h = self.block_hidden(tokens[anchors], pos, kv, ctx_mask)
        return self.logits(h[:, 1:])  # [A, B-1, V]


def dflash_loss(logits, tokens, anchors, gamma: float, labels_of=None):
    """logits [A, B-1, V]; position k (1..B-1) predicts tokens[anchor+k], weight exp(-(k-1)/gamma), normalised.

    labels_of maps target token ids to logit columns (-1: outside a reduced draft vocabulary, not trained on).
    Returns (loss, correct [B-1] counts, valid [B-1] counts); accuracy counts out-of-vocabulary labels as misses."""
    A, L, V = logits.shape
    idx = anchors[:, None] + torch.arange(1, L + 1, device=tokens.device)[None]  # [A, L]
    valid = idx < tokens.shape[0]
    labels = tokens[idx.clamp(max=tokens.shape[0] - 1)]
    if labels_of is not None:
        labels = labels_of(labels)
    counted = valid.clone()
    valid = valid & (labels >= 0)
    labels = labels.clamp(min=0)
    w = torch.exp(-torch.arange(L, device=logits.device, dtype=logits.dtype) / gamma)[None].expand(A, L) * valid
    ce = F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), reduction="none").view(A, L)
    loss = (ce * w).sum() / w.sum().clamp(min=1e-6)
    with torch.no_grad():
        correct = ((logits.argmax(-1) == labels) & valid).sum(0)
    return loss, correct, counted.sum(0)


def draft_pass(model: DFlashModel):
    """The model's draft pass (`DFlashModel.fuse`, each `Layer.draft_forward`, the final norm) as one call of
    draft_layers.cpp, its linears on fp16 rows (`kernels.f16_rows`): or None where the kernels are not built, the model
    is not on the CPU in fp32, or a width does not suit them (inputs a multiple of 32, head_dim of 16)."""
    c = model.c
    if (not packing_available() or c.head_dim % 16 or model.mask_embedding.device.type != "cpu"
            or model.mask_embedding.dtype != torch.float32):
        return None

    def rows(*linears: nn.Linear):  # the linears' outputs concatenated, as kernel_linear's tuple (None: unsuitable)
        bias = None if linears[0].bias is None else torch.cat([m.bias for m in linears])
        quant = f16_rows(torch.cat([m.weight for m in linears]), bias)
        return None if quant is None else kernel_linear(quant)

    def weight(norm: RMSNorm) -> torch.Tensor:
        return norm.weight.detach().float().contiguous()

    fc, none = rows(model.fc), torch.empty(0)
    tensors, ints, floats = [], [], []
    for L in model.layers:
        parts = [rows(L.q_proj), rows(L.k_proj, L.v_proj), rows(L.o_proj), rows(L.gate_proj, L.up_proj),
                 rows(L.down_proj)]
        if fc is None or any(p is None for p in parts):
            return None
        qk_norm = (torch.cat([weight(L.q_norm).expand(c.num_heads, -1), weight(L.k_norm).expand(c.num_kv_heads, -1)])
                   .contiguous() if c.qk_norm else none)  # [h + g, d]
        (q, kv, o, gu, down) = parts
        tensors += [weight(L.input_layernorm), q[0], q[1], kv[0], kv[1], qk_norm, o[0], o[1],
                    weight(L.post_attention_layernorm), gu[0], gu[1], down[0], down[1]]
        ints += [q[2], q[3], kv[2], kv[3], o[2], o[3], gu[2], gu[3], down[2], down[3], c.intermediate_size]
        floats += [L.input_layernorm.eps, L.post_attention_layernorm.eps, c.rms_norm_eps]
    return draft_layers(fc, weight(model.hidden_norm), model.hidden_norm.eps, weight(model.norm), model.norm.eps,
                        tensors, ints, floats, c.num_heads, c.num_kv_heads, c.head_dim, c.head_dim ** -0.5)


class DFlashDrafter(Drafter):
    """Inference wrapper: keeps the projected context K/V of every draft layer; each round only the new tokens'
    features are fused and projected."""

    def __init__(self, model: DFlashModel, pack: bool = False, calibrate: bool = True, quantize: bool = False):
        """pack: pre-pack the linears and the LM head for CPU (caddtree.kernels); the model is inference-only then.
        quantize: instead, run the whole draft pass in one C++ call (`draft_pass`: the layers' weights in fp16) and
        the head on fbgemm's int8 (`kernels.DynamicLinear`; not exact, a drafter need not be), or where the kernels
        are not built the layers on fbgemm's fp16, or where fbgemm is missing on 8-bit blocks (`kernels.q8_0`); what a
        target with native GGUF weights gets, whose steps are too short for an fp32 drafter. fp16 layers keep the
        drafter's proposals (the same τ to 3 decimals on 12 prompts, where int8 layers lost 3%: their activations
        share one 8-bit scale per call); the head's int8 changed no τ (docs/results.md).
        calibrate: shrink overconfident positions toward their observed hit rate (drafter.OnlineCalibration); the
        argmax per position, hence a linear block, is unchanged."""
        self.model = model.eval()
        self.calibrate = calibrate
        self._calibrations: dict = {}  # sampling setting -> OnlineCalibration (`drafter.for_setting`)
        self.head = None  # packed LM head, or None: model.logits
        self.linears = "fp32"  # the kernels the linears run on (part of the cost profile's key: `fingerprint`)
        self.fast = draft_pass(model) if quantize else None  # the draft pass in one C++ call (draft_layers.cpp)
        if self.fast is not None:
            head = model._shared["head"]
            self.head, self.linears = ((DynamicLinear(head, None, "int8"), "f16rows-i8head") if dynamic_available()
                                       else (q8_0(head), "f16rows-q8head"))
        elif quantize and drafter_linears(model, "fp16") > 0:
            self.head, self.linears = DynamicLinear(model._shared["head"], None, "int8"), "fbgemm-f16-i8head"
        elif quantize and quantize_linears(model) > 0:
            self.head, self.linears = q8_0(model._shared["head"]), "q8_0"
        elif pack and pack_linears(model) > 0:
            self.head, self.linears = PackedLinear(model._shared["head"]), "packed"
        self.c = model.c
        self.target_layers = list(self.c.target_layers)
        self.num_positions = self.c.block_size - 1
        self.reset(None)

    def __deepcopy__(self, memo) -> "DFlashDrafter":
        """A copy with state of its own (context K/V, calibration; the profile times copies): the one-call pass
        (`fast`) holds only weights and is shared, as a compiled object cannot be copied."""
        twin = type(self).__new__(type(self))
        memo[id(self)] = twin
        for key, value in self.__dict__.items():
            setattr(twin, key, value if key == "fast" else copy.deepcopy(value, memo))
        return twin

    @property
    def fingerprint(self) -> str:
        """The cost profile's key for this drafter: its architecture (as `drafter.drafter_id` hashes a config) and,
        for a native target's drafter (the one-call pass, or fbgemm's linears), its kernels and the draft pass's
        version (`DRAFT_PASS`): a profile priced with slower kernels or an older pass is not reused."""
        suffix = f"-{self.linears}-{DRAFT_PASS}" if self.linears not in ("fp32", "packed", "q8_0") else ""
        return f"DFlashDrafter-{settings_digest(self.c.digest_fields())}{suffix}"

    @property
    def calibration(self) -> OnlineCalibration | None:
        """The current sampling setting's calibration (None if not calibrating)."""
        if not self.calibrate:
            return None
        return for_setting(self._calibrations, self.sampling, lambda: OnlineCalibration(self.num_positions))

    def skip(self, features: torch.Tensor | None) -> None:
        """A round without a draft: the features wait for the next `propose` (projected there in one call)."""
        if features is not None:
            self._pending.append(features)

    def reset(self, prompt_ids=None) -> None:
        self._pending = []  # features of rounds that drafted nothing (`skip`), oldest first
        self.kv = None  # per layer (k, v) [g, C, d]: views of the first C positions of `kv_buf`
        self.kv_buf = None  # per layer (k, v) [g, capacity, d]
        self.ctx_len = 0
        for c in self._calibrations.values():  # the rates describe the drafter on this target: keep them
            c.forget_pending()

    def block(self, root: int, features: torch.Tensor | None = None) -> torch.Tensor:
        """The block after the context: features [k, F] of the next k context positions (or None), then the root
        token at position C + k (C = ctx_len) and B - 1 masks -> [B, H] normed; the context grows by k
        (each layer's `context_kv` + `DFlashModel.block_hidden` on A = 1, in one pass through `Layer.draft_forward`,
        or the same pass in one call of draft_layers.cpp: `fast`)."""
        m, C, B = self.model, self.ctx_len, self.c.block_size
        dev, dtype = m.mask_embedding.device, m.mask_embedding.dtype
        new = 0 if features is None else features.shape[0]
        ctx = m.fuse(features.to(dev)) if new and self.fast is None else None  # [k, H], all layers'; fast: fused there
        x = torch.cat([m._shared["embed"][root:root + 1].to(dtype), m.mask_embedding.expand(B - 1, -1)])  # [B, H]
        cos, sin = rope_rows(torch.arange(C, C + new + B, device=dev), self.c.head_dim, self.c.rope_freqs, dev,
                             dtype, self.c.rope_scale)
        like = x.new_empty(self.c.num_kv_heads, new + B, self.c.head_dim)
        bufs, kv = self.kv_buf or [(None, None)] * len(m.layers), self.kv or [(None, None)] * len(m.layers)
        # room for k + B rows after the C context rows (a grown buffer keeps the context's rows)
        self.kv_buf = [(room_for(kb, k, new + B, like), room_for(vb, v, new + B, like))
                       for (kb, vb), (k, v) in zip(bufs, kv)]
        if self.fast is not None:  # the same pass in one call, the fused context included
            feats = features.to(dev).float().contiguous() if new else torch.empty(0)
            out = self.fast.forward(feats, x, cos.contiguous(), sin.contiguous(), [kb for kb, _ in self.kv_buf],
                                    [vb for _, vb in self.kv_buf], C)
        else:
            for layer, (kb, vb) in zip(m.layers, self.kv_buf):
                x = layer.draft_forward(x, cos, sin, kb, vb, C, ctx)
            out = m.norm(x)
        self.ctx_len = C + new
        self.kv = [(kb[:, :C + new], vb[:, :C + new]) for kb, vb in self.kv_buf]
        return out

    @torch.inference_mode()
    def propose(self, tokens: torch.Tensor, features: torch.Tensor | None) -> torch.Tensor:
        """tokens [ℓ+1] (last = root at position ℓ), features [k, F] of positions ℓ-k..ℓ-1 -> log_probs [B-1, V]."""
        m = self.model
        ell = tokens.shape[0] - 1
        if self._pending:
            features = torch.cat(self._pending + ([] if features is None else [features]))
            self._pending = []
        new = 0 if features is None else features.shape[0]
        if self.ctx_len + new != ell:
            raise CaddtreeError(f"drafter context has {self.ctx_len + new} positions but the root is at {ell}: pass "
                                f"the features of every committed token exactly once (call reset() per generation)")
        h = self.block(int(tokens[-1]), features)  # [B, H]; the context grows by the new features
        logits = self.head(h[1:]) if self.head is not None else m.logits(h[1:])  # [B-1, K or V]
        if not self.sampling.greedy:  # the law the target samples from, as this drafter sees it (log-probs)
            logits = draft_log_probs(logits, self.sampling)
        cal = self.calibration
        if cal is None:
            return m.full_log_probs(logits)  # [B-1, V]
        cal.observe(tokens.tolist())
        top_p, top_i = torch.softmax(logits.float(), -1).max(-1)  # [B-1] (in the draft vocabulary)
        if self.c.draft_vocab_size:
            top_i = m.vocab_map[top_i]
        cal.expect(ell + 1, top_i.tolist(), top_p.tolist())
        return m.full_log_probs(logits, keep=calibration_keep(cal, self.num_positions, logits.device))


# ----------------------------------------------------------------------------------------------------- save / load
def save_drafter(model: DFlashModel, path) -> None:
    path = Path(path)
    sd = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}

    def write(tmp: Path) -> None:
        save_file(sd, str(tmp), metadata={"format": "pt"})
        os.chmod(tmp, 0o644)
    atomic_write(path / "model.safetensors", write)
    (path / "config.json").write_text(json.dumps({"model_type": "caddtree-dflash", **asdict(model.c)}, indent=1))


def check_target(c: DFlashConfig, target, where: str = "drafter") -> None:
    tc = target.config
    problems = []
    if c.target_hidden_size != tc.hidden_size:
        problems.append(f"hidden size {c.target_hidden_size} != target's {tc.hidden_size}")
    if c.vocab_size != target.vocab_size:
        problems.append(f"vocabulary {c.vocab_size} != target's {target.vocab_size}")
    if c.target_num_layers != tc.num_hidden_layers:
        problems.append(f"layer count {c.target_num_layers} != target's {tc.num_hidden_layers}")
    if not problems and c.target_fingerprint and target.fingerprint and c.target_fingerprint != target.fingerprint:
        if c.target_model and c.target_model == target.model_id:  # the same model in other blocks: drafts as well
            print(f"caddtree: {where} was trained on another file of {c.target_model} ({c.target_fingerprint}); "
                  f"drafting for {target.fingerprint} with it", file=sys.stderr)
        else:
            problems.append(f"target fingerprint {c.target_fingerprint} != {target.fingerprint}")
    if problems:
        raise CaddtreeError(f"{where} was trained for target '{c.target_name}' and does not fit '{target.name}' "
                            f"({'; '.join(problems)}): use a drafter trained for this target (`caddtree "
                            f"train-drafter --target {target.name}`) or --drafter lookup (needs no training)")


def load_drafter(path, target, device=None) -> DFlashDrafter:
    model = load_model(path, target, device)
    # pack_linears and quantize_linears leave non-CPU weights alone
    return DFlashDrafter(model, pack=target.packed, quantize=getattr(target, "weights", "fp32") == "native")


def load_model(path, target, device=None) -> DFlashModel:
    """The trainable DFlashModel of an exported drafter directory, checked against and bound to `target`."""
    path = Path(path)
    if not (path / "config.json").is_file() or not (path / "model.safetensors").is_file():
        raise CaddtreeError(f"{path} is not a DFlash drafter directory (needs config.json and model.safetensors)")
    redo = "re-export it (`caddtree train-drafter --export`) or copy it again"
    try:
        raw = json.loads((path / "config.json").read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CaddtreeError(f"{path}/config.json cannot be read ({type(e).__name__}): {redo}") from None
    if not isinstance(raw, dict) or raw.pop("model_type", "caddtree-dflash") != "caddtree-dflash":
        raise CaddtreeError(f"{path}/config.json is not a caddtree DFlash drafter config")
    try:
        c = DFlashConfig(**raw)
    except TypeError as e:  # a missing or unknown field
        raise CaddtreeError(f"{path}/config.json does not match this caddtree's drafter config ({e}): {redo}") from None
    check_target(c, target, where=f"drafter {path}")
    model = DFlashModel(c)
    try:
        model.load_state_dict(load_file(str(path / "model.safetensors")))
    except Exception as e:  # noqa: BLE001  safetensors' own error types (truncated file), or shapes not of this config
        raise CaddtreeError(f"{path}/model.safetensors does not load into the drafter its config.json describes "
                            f"({type(e).__name__}: {str(e).splitlines()[0][:120]}): {redo}") from None
    return model.to(device or target.device).bind(target)  # bind after loading: the head follows the saved vocab_map
