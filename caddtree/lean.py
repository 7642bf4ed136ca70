"""A lean forward for Llama- and Gemma-shaped Hugging Face causal LMs (llama, mistral, qwen2, qwen3, phi3, gemma2,
gemma3): the HF model's logits
with a handful of PyTorch ops per layer instead of HF's module tree, or, for the 1-96 rows of a plain step or a tree
verify on the CPU kernels, with the whole layer loop in one C++ call (`lean_layers.cpp`).

Why: at one token per step the model's Python and module overhead, not its arithmetic, sets much of the step time.
HF dispatches ~74 aten ops per decoder layer (135 torch-function calls); the Python loop here ~45 (72), about 25 of
them its own, the rest inside the linears and the KV cache. A layer is: rms_norm, one fused q/k/v linear, RoPE on q and
k together (cos/sin from the model's own `rotary_emb`, once per forward), the KV cache update, grouped-query attention
without repeating the KV heads, o_proj, residual, rms_norm, one fused gate/up linear, silu(gate) * up, down,
residual. The linears are the model's own modules (nn.Linear, PackedLinear or QuantLinear), fused once by
`caddtree.kernels.fuse_linears`. Where every linear is a CPU kernel's (GGUF blocks or fp32 panels), the C++ loop runs
the same layer with the kernels called directly and the KV rows written into the cache's buffers
(`GrowingLayer.reserve`). SmolLM2-135M on its native Q4_1 blocks, context 300, a shared 2-core AMD EPYC (`python
scripts/step_profile.py`, results/bench-amd512-lean2/step_profile.md): one-token step 11.9 ms (Python loop) -> 7.8
(C++ loop) on 2 threads, the time outside linears and attention 3.8 -> 1.05 ms (HF's forward: 21.8 ms, 8.6 outside,
results/bench-amd512-native).

Exactness (batch invariance): a plain step (n = 1, no mask) and a tree verify (n > 1, ancestor mask) must give a token
the same logits bit for bit. Norms, RoPE and silu compute each row alone (in both loops); the linears do where they
are batch-invariant (PackedLinear, QuantLinear; PyTorch's own GEMM is not). PyTorch's SDPA is not: a row's result
changes with the number of query rows and with masked columns around it. On CPU in fp32 attention is therefore
`kernels.row_attention`: each row alone over its allowed columns in cache order, so a tree node's output is the plain
step's bit for bit. The same holds in fp16/bf16 (q, k, v widened to fp32 exactly, each output rounded back once, the
linears on `kernels.half_linear`), where PyTorch's norms and elementwise ops are per row too (tests/test_halfprec.py
checks it). Elsewhere (no C++ kernels, another dtype or device) the rows of a verify whose mask is the causal
one (the root and the leading chain of the tree) are attended one by one with exactly the plain step's SDPA call, the
others (nodes after the first branch) in one grouped call with the mask: those match a plain step only to fp32
rounding (~1e-6), so a near-tie there could flip a token. Prefill (more rows than the kernels take, no mask) uses
the Python loop and one causal SDPA call: nothing compares its rows with plain steps. The two loops round norms and
silu differently in the last place, so which one runs is decided by the row count alone, never per call site.

Sliding windows (Mistral, Phi3 on every layer; Qwen2/3 on the layers `layer_types` names): a sliding layer's row at
position p sees the allowed columns whose positions are > p - W (HF's rule), so each forward carries two masks, the
full layers' and the sliding layers' (`_window_mask`); the row kernel attends each row over its own layer kind's
columns, and a plain step past the window is a one-row masked call over the same columns a tree node on that path
gets. Phi3's q/k/v and gate/up are stored fused in the order read here; its longrope picks short or long frequencies
by the longest position of the call, so cos/sin are asked row by row (a verify's rows get their plain steps' values).
Gemma2/3: RMSNorm multiplies by 1 + w (taken here as the norm's weight, computed once), the attention's and the MLP's
outputs are RMS-normed before their residual adds (four norms a layer), gelu-tanh replaces silu, the embedding module
scales by sqrt(H) itself, the logits are soft-capped (cap · tanh(z / cap)) where the config says so, Gemma2's
attention scores too (in the row kernel, each column alone; Gemma3's forward ignores its config's attention cap, so
this does too), and Gemma3 asks its rotary_emb for each layer kind's cos/sin (local and global bases).
Refused (the HF forward runs, exactness "not guaranteed"): partial rotary, dynamic RoPE (its frequencies depend on
earlier calls), other layer types, bidirectional attention, other families.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from caddtree.kernels import (KERNEL_DTYPES, MAX_ROWS, fuse_linears, kernel_linear, lean_layers, packing_available,
                              row_attention)
from caddtree.kvcache import GrowingLayer

FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "phi3", "gemma2", "gemma3_text")
GEMMA = ("gemma2", "gemma3_text")  # (1 + w) norms, four a layer, gelu-tanh, soft-capped logits
QK_NORM = ("qwen3", "gemma3_text")  # q and k RMS-normed per head before RoPE


class Layer(NamedTuple):
    """One decoder layer as the lean forward reads it: norms as (weight they multiply by, eps); `post_attn`, `post_ff`
    (Gemma) norm the attention's and the MLP's outputs, else None; `rope` indexes the forward's cos/sin."""
    ln1: tuple
    qkv: object  # the fused q/k/v linear, [q | k | v] out
    qk_norm: tuple | None  # ([h + g, d]: q's weight on q heads, k's on k heads, eps) or None
    o: object
    post_attn: tuple | None
    ln2: tuple
    gate_up: object  # [gate | up] out
    down: object
    inter: int
    post_ff: tuple | None
    rope: int


def sliding_layers(cfg) -> tuple[int | None, list[bool]]:
    """(window W or None, per decoder layer: whether it slides). Models with `layer_types` (Qwen2/3) name each
    layer's kind; Mistral and Phi3 apply `sliding_window` to every layer. A sliding layer's query at position p sees
    keys at positions > p - W (HF's rule, masking_utils.sliding_window_overlay)."""
    count, w = cfg.num_hidden_layers, getattr(cfg, "sliding_window", None)
    types = getattr(cfg, "layer_types", None)
    flags = [t == "sliding_attention" for t in types] if types is not None else [w is not None] * count
    return (w, flags) if w is not None and any(flags) else (None, [False] * count)


def beyond_window(ctx: int, position_ids, window: int):
    """[n, ctx + n] bool: the columns W or more positions before each row's (HF's rule keeps q - kv < W); cache
    column j holds position j (the committed text in order), the n new columns `position_ids` [n]."""
    kv_pos = torch.cat([torch.arange(ctx, device=position_ids.device), position_ids])  # [ctx + n]
    return (position_ids[:, None] - kv_pos[None, :]) >= window


def _rope_types(rotary) -> list[str]:
    """The rope types of a rotary_emb: one, or one per layer kind (Gemma3's dict)."""
    kind = getattr(rotary, "rope_type", None)
    return [str(t) for t in kind.values()] if isinstance(kind, dict) else [str(kind)]


def _norm_of(norm, one_plus: bool) -> tuple:
    """An HF RMSNorm as (the weight it multiplies by, eps); one_plus (Gemma): it multiplies by 1 + w (formed in fp32,
    as HF does)."""
    w = norm.weight.detach()
    if one_plus:
        w = (1.0 + w.float()).to(w.dtype)
    return w, norm.variance_epsilon if hasattr(norm, "variance_epsilon") else norm.eps


def lean_unsupported(model) -> str | None:
    """None if `LeanForward` can run this HF model, else a short reason (e.g. 'partial rotary', 'model_type gpt2')."""
    cfg = getattr(model, "config", None)
    kind = getattr(cfg, "model_type", None)
    if kind not in FAMILIES:
        return f"model_type {kind}"
    act, want = ((getattr(cfg, "hidden_activation", None), "gelu_pytorch_tanh") if kind in GEMMA
                 else (getattr(cfg, "hidden_act", None), "silu"))
    if act != want:
        return f"hidden activation {act}"
    if getattr(cfg, "use_bidirectional_attention", False):
        return "bidirectional attention"
    if any(t not in ("full_attention", "sliding_attention") for t in getattr(cfg, "layer_types", None) or ()):
        return "layer types other than full and sliding attention"
    params = getattr(cfg, "rope_parameters", None) or {}
    params = [p for p in params.values() if isinstance(p, dict)] or [params]  # Gemma3: one per layer kind
    if any(float(p.get("partial_rotary_factor", 1.0)) != 1.0 for p in params):
        return "partial rotary"
    inner = getattr(model, "model", None)
    parts = ("embed_tokens", "layers", "norm", "rotary_emb")
    if inner is None or not all(hasattr(inner, p) for p in parts) or model.get_output_embeddings() is None:
        return "not a Llama-shaped model"
    if any("dynamic" in t for t in _rope_types(inner.rotary_emb)):
        return "rope_type dynamic (its frequencies depend on earlier calls)"
    h, g = cfg.num_attention_heads, getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    for layer in inner.layers[:cfg.num_hidden_layers]:
        a, m = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
        if kind == "phi3":  # q/k/v and gate/up already fused, in the order the lean forward reads them
            names = [(a, "qkv_proj"), (a, "o_proj"), (m, "gate_up_proj"), (m, "down_proj")]
        else:
            names = [(a, "q_proj"), (a, "k_proj"), (a, "v_proj"), (a, "o_proj"), (m, "gate_proj"), (m, "up_proj"),
                     (m, "down_proj")]
        norm_names = ["input_layernorm", "post_attention_layernorm"] + (
            ["pre_feedforward_layernorm", "post_feedforward_layernorm"] if kind in GEMMA else [])
        if any(not hasattr(o, name) for o, name in names + [(layer, n) for n in norm_names]):
            return "not a Llama-shaped layer"
        d = getattr(a, "head_dim", None)
        if not d or h % g:
            return "head_dim does not match the projections"
        if kind == "phi3":
            ok = a.qkv_proj.out_features == (h + 2 * g) * d and m.gate_up_proj.out_features % 2 == 0
        else:
            ok = (a.q_proj.out_features, a.k_proj.out_features, a.v_proj.out_features) == (h * d, g * d, g * d)
        if not ok or getattr(a.o_proj, "in_features", h * d) != h * d:
            return "head_dim does not match the projections"
        if hasattr(a, "q_norm") != (kind in QK_NORM) or hasattr(a, "k_norm") != (kind in QK_NORM):
            return f"unexpected q/k norm for {kind}"
        norms = [getattr(layer, n) for n in norm_names] + ([a.q_norm, a.k_norm] if kind in QK_NORM else [])
        if not all(type(n).__name__.endswith("RMSNorm") and (hasattr(n, "variance_epsilon") or hasattr(n, "eps"))
                   for n in norms):
            return "not an RMSNorm"
    if model.training:  # attention dropout
        return "training mode"
    return None


class LeanForward:
    """`Target.forward`'s contract for a supported HF *ForCausalLM (on its device, eval mode, linears final)."""

    def __init__(self, model, exact: bool = True, native: bool = True):
        """exact: attend a verify's causal-prefix rows one by one as plain steps (bit-identical to them; each such
        row reads the whole cache again), else every row of a masked forward in one grouped call. native: run the
        decoder layers of up to MAX_ROWS rows in one C++ call (`lean_layers.cpp`) where every linear is one of the
        CPU kernels' (GGUF blocks or fp32 panels); False: always this file's Python loop."""
        reason = lean_unsupported(model)
        if reason is not None:
            raise ValueError(f"LeanForward cannot run this model: {reason}")
        cfg, inner = model.config, model.model
        a0, gemma = inner.layers[0].self_attn, cfg.model_type in GEMMA
        self.h, self.d = cfg.num_attention_heads, a0.head_dim
        self.g = getattr(cfg, "num_key_value_heads", None) or self.h
        self.r, self.scale, self.exact = self.h // self.g, a0.scaling, exact
        self.window, self.sliding = sliding_layers(cfg)  # W or None, [layers] bool
        self.row_kernel = packing_available() and self.d % 16 == 0  # CPU fp32: kernels.row_attention
        self.embed, self.rotary, self.lm_head = inner.embed_tokens, inner.rotary_emb, model.get_output_embeddings()
        self.gelu = gemma  # the MLP's activation: gelu-tanh, else silu
        # Gemma2's attention scores and Gemma2/3's logits soft-capped where the config sets a cap (0: none)
        self.softcap = float((cfg.model_type == "gemma2" and getattr(cfg, "attn_logit_softcapping", None)) or 0.0)
        self.final_softcap = float((gemma and getattr(cfg, "final_logit_softcapping", None)) or 0.0)
        # Gemma3: cos/sin per layer kind (rotary_emb(x, positions, kind)); else one pair for every layer
        by_kind = isinstance(getattr(self.rotary, "rope_type", None), dict)
        kinds = list(getattr(cfg, "layer_types", None) or ()) if by_kind else []
        self.rope_kinds = sorted(set(kinds)) or [None]
        # longrope picks its frequencies by the longest position of the call: asked row by row, each row gets a
        # plain step's cos/sin
        self.rope_per_row = "longrope" in _rope_types(self.rotary)
        self.norm_w, self.norm_eps = _norm_of(inner.norm, gemma)
        self.tie_last = getattr(cfg, "tie_last_hidden_states", None) is not False
        w = self.norm_w
        # rotate_half(x) * sin == flip(x halves) * (sin with its first half negated)
        self.sign = torch.tensor([-1.0, 1.0], dtype=w.dtype, device=w.device).view(2, 1)  # [2, 1]
        self.layers = [self._layer(layer, gemma, kinds[i] if kinds else None)
                       for i, layer in enumerate(inner.layers[:cfg.num_hidden_layers])]
        self.native = self._native_layers() if native and self.row_kernel else None
        self._rope_table = None  # (cos, sin) [R, P, d] by position, False: not used (`_rope_rows`)

    def _layer(self, layer, gemma: bool, kind: str | None) -> Layer:
        """One HF decoder layer's parts, q/k/v and gate/up fused (Phi3: as stored)."""
        a, m = layer.self_attn, layer.mlp
        qk_norm = None
        if hasattr(a, "q_norm"):  # qwen3, gemma3: RMSNorm per head over d, q's weight on q heads, k's on k heads
            (wq, eps), (wk, _) = _norm_of(a.q_norm, gemma), _norm_of(a.k_norm, gemma)
            qk_norm = torch.cat([wq.expand(self.h, self.d), wk.expand(self.g, self.d)]), eps  # [h + g, d]
        if hasattr(a, "qkv_proj"):  # phi3: fused as stored ([q | k | v], [gate | up])
            qkv, gate_up, inter = a.qkv_proj, m.gate_up_proj, m.gate_up_proj.out_features // 2
        else:
            qkv, gate_up = fuse_linears([a.q_proj, a.k_proj, a.v_proj]), fuse_linears([m.gate_proj, m.up_proj])
            inter = m.gate_proj.out_features
        if gemma:  # Gemma's post_attention_layernorm norms the attention's output; pre_feedforward the MLP's input
            post_attn = _norm_of(layer.post_attention_layernorm, True)
            ln2 = _norm_of(layer.pre_feedforward_layernorm, True)
            post_ff = _norm_of(layer.post_feedforward_layernorm, True)
        else:
            post_attn, ln2, post_ff = None, _norm_of(layer.post_attention_layernorm, False), None
        return Layer(_norm_of(layer.input_layernorm, gemma), qkv, qk_norm, a.o_proj, post_attn, ln2, gate_up,
                     m.down_proj, inter, post_ff, self.rope_kinds.index(kind))

    @property
    def label(self) -> str:
        """This forward in cost-profile keys: 'lean2' where the C++ layer loop runs, else 'lean'."""
        return "lean2" if self.native is not None else "lean"

    def _native_layers(self):
        """lean_layers.cpp's LeanLayers over these layers, or None where a linear is not a CPU kernel's or a norm
        weight is not CPU fp32."""
        tensors, ints, floats, none = [], [], [], (torch.empty(0), 0.0)
        for L in self.layers:
            specs = [kernel_linear(m) for m in (L.qkv, L.o, L.gate_up, L.down)]
            norms = [n for n in (L.ln1, L.ln2, L.qk_norm, L.post_attn, L.post_ff) if n is not None]
            if any(s is None for s in specs) or any(w.dtype != torch.float32 or w.device.type != "cpu"
                                                    for w, _ in norms):
                return None
            (qw, qb, qk, qa), (ow, ob, ok, oa), (gw, gb, gk, ga), (dw, db, dk, da) = specs
            (w1, e1), (w2, e2), (qn, qe), (pa, e3), (pf, e4) = (
                (w.contiguous(), e) for w, e in (L.ln1, L.ln2, L.qk_norm or none, L.post_attn or none,
                                                 L.post_ff or none))
            tensors += [w1, qw, qb, qn, ow, ob, w2, gw, gb, dw, db, pa, pf]
            ints += [qk, qa, ok, oa, gk, ga, dk, da, L.inter, int(self.gelu), L.rope]
            floats += [e1, e2, qe, e3, e4]
        sliding = [int(w) for w in self.sliding]
        return lean_layers(tensors, ints, floats, sliding, self.h, self.g, self.d, self.scale, self.softcap)

    @torch.inference_mode()
    def __call__(self, input_ids, cache, position_ids=None, attn_mask=None, hidden_layers=()):
        """input_ids [n] long on top of `cache` (updated in place; its `.layers[i].update(k, v)` takes k, v
        [1, g, n, d] and returns the whole [1, g, L, d]); position_ids [n] (default ctx + arange(n)); attn_mask
        [n, ctx + n] float additive or None (causal). Returns logits [n, V] float32 and the outputs of the decoder
        layers in `hidden_layers`, concatenated [n, len(hidden_layers) * H] (None if none asked)."""
        n, ctx = input_ids.shape[0], cache.get_seq_length()
        x = self.embed(input_ids)  # [n, H] (Gemma's embedding module scales by sqrt(H) itself)
        cos, sin = self._rope_rows(x, ctx, position_ids)  # [R, n, d] each: one per rope kind
        allowed = None if attn_mask is None else attn_mask == 0  # [n, L] bool, None: causal
        masks = (allowed, self._window_mask(allowed, ctx, n, position_ids))  # full layers', sliding layers'
        if (self.native is not None and n <= MAX_ROWS and x.device.type == "cpu" and x.dtype == torch.float32
                and all(type(layer) is GrowingLayer for layer in cache.layers)):
            x, feats = self._native_call(x, cos.contiguous(), sin.contiguous(), cache, ctx, masks, hidden_layers)
        else:
            x, feats = self._python_layers(x, cos, sin, cache, ctx, masks, hidden_layers)
        H, want = x.shape[-1], set(hidden_layers)
        x = F.rms_norm(x, (H,), self.norm_w, self.norm_eps)
        if self.tie_last and len(self.layers) - 1 in want:  # HF's hidden_states[-1] is the normed output
            feats[len(self.layers) - 1] = x
        logits = self.lm_head(x)  # [n, V]
        if self.final_softcap:  # in the head's dtype, as HF
            logits = torch.tanh(logits / self.final_softcap) * self.final_softcap
        logits = logits.float()
        if not want:
            return logits, None
        return logits, torch.cat([feats[k] for k in hidden_layers], dim=-1)

    def _rope_rows(self, x, ctx: int, position_ids):
        """cos, sin [R, n, d] for the rows of x [n, H] at position_ids [n] (None: ctx .. ctx + n - 1), read from a table
        of every position below a bound (`_rope` over arange(P), P a power of two >= 1024, remade where a position
        reaches P). Why: the rotary module's few ops cost ~0.1 ms a plain step, cache-cold after the weights. Its values
        are elementwise functions of the position (position · inv_freq, then cos and sin), so a table row equals what a
        call for that position alone gives; `_make_rope_table` checks that on a few rows and leaves the table off (the
        module asked every call) where it does not hold. Longrope, asked row by row, never uses the table."""
        n = x.shape[0]
        top = ctx + n if position_ids is None else int(position_ids.max()) + 1
        table = self._rope_table
        if table is not False and (table is None or top > table[0].shape[1] or table[0].dtype != x.dtype
                                   or table[0].device != x.device):
            table = self._rope_table = self._make_rope_table(x, top)
        if table is False:
            if position_ids is None:
                position_ids = torch.arange(ctx, ctx + n, device=x.device)
            return self._rope(x, position_ids)
        cos, sin = table
        if position_ids is None:
            return cos[:, ctx:ctx + n], sin[:, ctx:ctx + n]
        return cos.index_select(1, position_ids), sin.index_select(1, position_ids)

    def _make_rope_table(self, x, top: int):
        """(cos, sin) [R, P, d] for positions 0 .. P - 1, P = max(1024, the power of two >= top), in x's dtype and
        on its device; False where the rotary module is asked row by row (longrope) or a checked row differs from
        the module's answer for that position alone."""
        if self.rope_per_row:
            return False
        P = max(1024, 1 << (top - 1).bit_length())
        cos, sin = self._rope(x[:1], torch.arange(P, device=x.device))
        for p in (0, 1, top - 1, P - 1):
            c, s = self._rope(x[:1], torch.arange(p, p + 1, device=x.device))
            if not (torch.equal(c, cos[:, p:p + 1]) and torch.equal(s, sin[:, p:p + 1])):
                return False
        return cos, sin

    def _rope(self, x, position_ids):
        """cos, sin [R, n, d] of the rows' positions from the model's own rotary_emb, one per rope kind (Gemma3:
        rotary_emb(x, positions, kind); else R = 1), row by row for longrope."""
        def ask(x, pos, kind):  # -> cos, sin [1, rows, d]
            return self.rotary(x, pos) if kind is None else self.rotary(x, pos, kind)

        pairs = []
        for kind in self.rope_kinds:
            if not self.rope_per_row:
                pairs.append(ask(x, position_ids[None], kind))
                continue
            rows = [ask(x[i:i + 1], position_ids[None, i:i + 1], kind) for i in range(x.shape[0])]
            pairs.append((torch.cat([c for c, _ in rows], 1), torch.cat([s for _, s in rows], 1)))
        return torch.cat([c for c, _ in pairs]), torch.cat([s for _, s in pairs])

    def _window_mask(self, allowed, ctx, n, position_ids):
        """The sliding layers' allowed columns: `allowed` ([n, L] bool, None: causal) less the columns W or more
        positions before the row's (cache column j holds position j, the n new ones `position_ids` [n], None: ctx ..
        ctx + n - 1). `allowed` itself where no column can be that far: without a window, or while ctx + n <= W (a
        row's position never exceeds its cache index)."""
        W = self.window
        if W is None or ctx + n <= W:
            return allowed
        if position_ids is None:
            position_ids = torch.arange(ctx, ctx + n, device=self.norm_w.device)
        if allowed is None:
            dev = position_ids.device
            allowed = torch.arange(ctx + n, device=dev) <= torch.arange(ctx, ctx + n, device=dev)[:, None]
        return allowed & ~beyond_window(ctx, position_ids, W)

    def _native_call(self, x, cos, sin, cache, ctx, masks, hidden_layers):
        """The decoder layers in one C++ call: x [n, H], cos/sin [R, n, d], masks (full layers', sliding layers')
        [n, L] bool or None; the cache's buffers get room for n rows, lean_layers.cpp writes them, then the layers
        take them in. -> (x [n, H], {layer: its output [n, H]})."""
        n, layers = x.shape[0], cache.layers
        k_bufs, v_bufs = [layer.buf_k for layer in layers], [layer.buf_v for layer in layers]
        if not self.native.has_room(
                [layer.keys for layer in layers], [layer.values for layer in layers], k_bufs, v_bufs, ctx, n):
            like = x.new_empty(1, self.g, 0, self.d)  # a fresh cache, a full buffer, or keys that are not views
            k_bufs, v_bufs = zip(*[layer.reserve(n, like) for layer in layers])
        full, sliding = (torch.empty(0, dtype=torch.bool) if m is None else m.contiguous() for m in masks)
        out = self.native.forward(x, cos, sin, list(k_bufs), list(v_bufs), ctx, full, sliding, list(hidden_layers))
        f, count = 1 + len(hidden_layers), len(layers)
        for layer, k, v in zip(layers, out[f:f + count], out[f + count:]):  # the cache takes in the n rows written
            layer.keys, layer.values = k, v
        return out[0], dict(zip(hidden_layers, out[1:f]))

    def _python_layers(self, x, cos, sin, cache, ctx, masks, hidden_layers):
        """The decoder layers as PyTorch calls (any row count, dtype, device): x [n, H], cos/sin [R, n, d], masks
        (full layers', sliding layers') [n, L] bool or None (causal) -> (x [n, H], {layer: its output [n, H]})."""
        n, H = x.shape
        h, g, d = self.h, self.g, self.d
        cos, sin = cos.reshape(-1, n, 1, 2, d // 2), sin.reshape(-1, n, 1, 2, d // 2) * self.sign  # [R, n, 1, 2, d/2]
        if self.row_kernel and n <= MAX_ROWS and x.device.type == "cpu" and x.dtype in KERNEL_DTYPES:
            plans = [(-1, None, mask) for mask in masks]  # row_attention over each layer kind's allowed columns
        else:
            tree = masks[0] is not None
            plans = [self._plan(n, ctx, masks[0], None, tree, x)]
            plans.append(self._plan(n, ctx, masks[1], self.window, tree, x) if any(self.sliding) else plans[0])
        want, feats = set(hidden_layers), {}
        for i, L in enumerate(self.layers):
            qkv = L.qkv(F.rms_norm(x, (H,), *L.ln1)).reshape(1, n, h + 2 * g, d)  # [1, n, h + 2g, d]
            qk = qkv[0, :, :h + g]  # [n, h + g, d]: q heads, then k heads
            if L.qk_norm is not None:
                qk = F.rms_norm(qk, (d,), None, L.qk_norm[1]) * L.qk_norm[0]
            qk = qk.unflatten(-1, (2, d // 2))  # [n, h + g, 2, d/2]
            qk = (qk * cos[L.rope] + qk.flip(2) * sin[L.rope]).view(1, n, h + g, d)  # RoPE, rotate-half convention
            k_all, v_all = cache.layers[i].update(qk[:, :, h:].transpose(1, 2),  # [1, g, n, d] in, [1, g, L, d] out
                                                  qkv[:, :, h + g:].transpose(1, 2))
            y = L.o(self._attend(qk[0, :, :h], k_all, v_all, ctx, *plans[self.sliding[i]]))  # [n, H]
            x = x + (y if L.post_attn is None else F.rms_norm(y, (H,), *L.post_attn))
            gu = L.gate_up(F.rms_norm(x, (H,), *L.ln2))  # [n, 2I]
            act = F.gelu(gu[:, :L.inter], approximate="tanh") if self.gelu else F.silu(gu[:, :L.inter])
            y = L.down(act * gu[:, L.inter:])
            x = x + (y if L.post_ff is None else F.rms_norm(y, (H,), *L.post_ff))
            if i in want:
                feats[i] = x
        return x, feats

    def _plan(self, n, ctx, allowed, window, tree, x):
        """An SDPA plan for one layer kind: allowed [n, L] bool (None: causal, nothing outside a window); tree: the
        rows are a verify's (else a plain step or a prefill, causal) -> (exact: the leading rows attended one by one
        as plain steps, row i over cache columns [max(0, ctx + i + 1 - window), ctx + i] (their allowed columns are
        exactly those), mask [r * (n - exact), L] additive for the others, repeated per query head of a group, or
        None; window)."""
        if not tree and n == 1:  # a plain step: its columns are the causal ones less the window's cut
            return 1, None, window
        L = ctx + n
        cols, rows = torch.arange(L, device=x.device), torch.arange(ctx, L, device=x.device)[:, None]
        causal = cols <= rows  # [n, L]
        if window is not None:
            causal &= cols > rows - window
        if not tree:  # prefill: nobody compares its rows with plain steps
            return 0, self._additive(causal if allowed is None else allowed, x).repeat(self.r, 1), window
        exact = int((allowed == causal).all(1).cumprod(0).sum()) if self.exact else 0
        return exact, (self._additive(allowed[exact:], x).repeat(self.r, 1) if exact < n else None), window

    @staticmethod
    def _additive(allowed, x):
        """[m, L] bool -> additive float mask in x's dtype (0 where allowed, -inf elsewhere)."""
        return torch.zeros(allowed.shape, dtype=x.dtype, device=x.device).masked_fill_(~allowed, float("-inf"))

    def _attend(self, q, k, v, ctx, exact, rest_mask, extra):
        """q [n, h, d] against the cache k, v [1, g, L, d] -> [n, h * d]. exact = -1: `kernels.row_attention`
        over the allowed columns `extra` ([n, L] bool or None: causal; every row alone over its allowed columns:
        bit-identical to the plain step; fp16/bf16 widened to fp32 exactly, the output rounded back once). Else SDPA
        (`extra`: the window or None), query heads regrouped per KV head ([1, g, r * rows, d]) so the cache is never
        repeated h / g times."""
        n, (h, g, r, d) = q.shape[0], (self.h, self.g, self.r, self.d)
        if exact == -1:
            out = row_attention(q.float(), k[0].float(), v[0].float(), extra, self.scale, self.softcap)  # [n, h, d]
            return out.to(q.dtype).reshape(n, h * d)
        outs = []
        for i in range(exact):  # row i as the plain step at cache index ctx + i
            lo = 0 if extra is None else max(0, ctx + i + 1 - extra)
            outs.append(self._sdpa(q[i].view(1, g, r, d), k[:, :, lo:ctx + i + 1], v[:, :, lo:ctx + i + 1])
                        .reshape(1, h * d))
        if exact < n:
            m = n - exact
            qg = q[exact:].view(m, g, r, d).permute(1, 2, 0, 3).reshape(1, g, r * m, d)
            o = self._sdpa(qg, k, v, rest_mask)  # [1, g, r m, d]
            outs.append(o.reshape(g, r, m, d).permute(2, 0, 1, 3).reshape(m, h * d))
        return outs[0] if len(outs) == 1 else torch.cat(outs)

    def _sdpa(self, q, k, v, mask=None):
        """PyTorch's SDPA (q [1, g, m, d], k, v [1, g, L, d], mask [m, L] additive or None: every column), or where
        the scores are soft-capped (Gemma2; SDPA cannot) the same attention written out as HF's eager one."""
        if not self.softcap:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale)
        s = torch.tanh(q @ k.transpose(-1, -2) * self.scale / self.softcap) * self.softcap  # [1, g, m, L]
        if mask is not None:
            s = s + mask
        return torch.softmax(s.float(), -1).to(q.dtype) @ v
