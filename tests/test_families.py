"""Every Hugging Face causal-LM family we claim, token-identical to a cache-free plain greedy reference under ar,
ddtree and caddtree, with sliding windows shorter and longer than the context (tiny random models, fp32, CPU).

What it guards: the cache keeps every layer consistent through compaction (sliding-window layers included), the tree
mask applies each layer's window (one mask for Mistral/Phi3, a mask per layer type for Qwen2/Gemma), and models whose
attention refuses SDPA (Gemma2's softcapping) load with eager attention.
"""
from pathlib import Path

import pytest
import torch
from transformers import (AutoModelForCausalLM, Gemma2Config, Gemma3TextConfig, GPT2Config, GPT2LMHeadModel,
                          LlamaConfig, MistralConfig, Phi3Config, Qwen2Config, Qwen3Config)

import caddtree.target as tgt
from caddtree.costmodel import fit_cost_model
from caddtree.dflash import DFlashConfig, DFlashDrafter, DFlashModel, load_model, save_drafter
from caddtree.engine import Decoder
from caddtree.errors import CaddtreeError
from caddtree.kernels import pack_linears, packing_available
from caddtree.lean import LeanForward
from caddtree.profile import device_label, profile_verify
from caddtree.target import Target, _load_dir, crop_cache, prefill
from caddtree.tree import build_tree
from caddtree.verify import verify_tree
from conftest import TOY_COSTS, OracleDrafter, RandomDrafter, prompt, reference_greedy

V, NEW, PROMPT = 64, 24, 12  # the context reaches 36 tokens
BASE = dict(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=256, initializer_range=0.3, bos_token_id=0,
            eos_token_id=1, pad_token_id=0)


def config(family: str, window: int | None, **over):
    base = BASE | over
    if family == "llama":
        return LlamaConfig(**base, tie_word_embeddings=True,
                           rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                                            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                            "original_max_position_embeddings": 64})
    if family == "qwen2":  # layers >= max_window_layers slide
        return Qwen2Config(**base, use_sliding_window=window is not None, sliding_window=window or 4096,
                           max_window_layers=1)
    if family == "qwen3":
        return Qwen3Config(**{"head_dim": 8} | base)
    if family == "mistral":
        return MistralConfig(**base, sliding_window=window)
    if family == "phi3":
        return Phi3Config(**base, sliding_window=window, pad_token_id_=None)
    if family == "gemma2":
        return Gemma2Config(**{"head_dim": 8} | base, sliding_window=window or 4096, query_pre_attn_scalar=8,
                            attn_logit_softcapping=50.0, final_logit_softcapping=30.0)
    if family == "gemma3":
        return Gemma3TextConfig(**{"head_dim": 8} | base, sliding_window=window or 4096, query_pre_attn_scalar=8,
                                layer_types=["sliding_attention", "full_attention", "sliding_attention"])
    raise ValueError(family)


FAMILIES = ["llama", "qwen2", "qwen3", "mistral", "phi3", "gemma2", "gemma3"]
WINDOWED = {"qwen2", "mistral", "phi3", "gemma2", "gemma3"}
WINDOWS = {"short": 6, "long": 64}  # shorter / longer than the 36-token context


def tiny(family: str, window: int | None, seed: int = 0, **over) -> Target:
    torch.manual_seed(seed)
    cfg = config(family, window, **over)
    attn = "eager" if family == "gemma2" else "sdpa"
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation=attn).eval()
    model.generation_config.eos_token_id = 1
    return Target(model=model, tokenizer=None, name=f"tiny-{family}", fingerprint=f"tiny-{family}")


def cases():
    for family in FAMILIES:
        for name, w in (WINDOWS.items() if family in WINDOWED else [("none", None)]):
            yield pytest.param(family, w, id=f"{family}-{name}")


@pytest.mark.parametrize("family, window", list(cases()))
def test_every_method_is_token_identical_to_cache_free_greedy(family, window):
    target = tiny(family, window)
    if window is not None:
        assert target.window[0] == window
    cost = fit_cost_model(TOY_COSTS, {"target_fingerprint": target.fingerprint})
    for seed in (0, 1):
        p = prompt(seed, PROMPT, V)
        want = reference_greedy(target, p, NEW)
        decoders = {"ar": Decoder(target),
                    "ddtree-oracle": Decoder(target, OracleDrafter(target, seed=seed), method="ddtree", budget=6),
                    "ddtree-random": Decoder(target, RandomDrafter(V, seed=seed), method="ddtree", budget=8),
                    "caddtree": Decoder(target, OracleDrafter(target, seed=seed), method="caddtree",
                                        cost_model=cost)}
        for name, dec in decoders.items():
            got = dec.generate(p, NEW).tokens
            assert got == want, (family, window, name, seed)
        # the drafts were accepted and rejected along the way: the caches went through compaction with gaps
        res = decoders["ddtree-oracle"].generate(p, NEW)
        assert any(r.accepted > 0 for r in res.rounds) and any(r.accepted < r.tree_size for r in res.rounds)


@pytest.mark.parametrize("family", sorted(WINDOWED))
def test_tree_verify_logits_equal_each_nodes_own_forward_past_the_window(family):
    """A 20-token context (window 6), a 12-node random tree on top: each node's verify logits equal a cache-free
    forward of its own path (the window applies per layer type; the tree's other branches stay invisible)."""
    target = tiny(family, 6, seed=1)
    ctx_ids = prompt(3, 20, V)
    cache = target.new_cache()
    target.forward(ctx_ids[:-1], cache)
    tree = build_tree(torch.log_softmax(torch.randn(5, V) * 3, -1), 12)
    logits, _ = verify_tree(target, cache, int(ctx_ids[-1]), tree)
    for i in range(len(tree)):
        path, j = [], i
        while j >= 0:
            path.append(int(tree.tokens[j]))
            j = int(tree.parents[j])
        seq = torch.cat([ctx_ids, torch.tensor(path[::-1])])
        with torch.no_grad():
            ref = target.model(seq[None]).logits[0, -1].float()
        torch.testing.assert_close(logits[i + 1], ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("family", sorted(WINDOWED))
def test_the_profiler_runs_past_the_window_and_its_crop_restores_the_cache(family):
    """The profiler's cycle on a 20-token context, window 6: verify a tree, crop back to the context, verify again
    (the same logits bit for bit: the crop left every layer, sliding ones included, as before), and a whole
    `profile_verify` over contexts 4 and 20 gives finite, positive costs."""
    target = tiny(family, 6, seed=2)
    ids = prompt(4, 21, V)
    cache = target.new_cache()
    prefill(target, cache, ids[:-1])
    tree = build_tree(torch.log_softmax(torch.randn(5, V) * 3, -1), 8)
    first, _ = verify_tree(target, cache, int(ids[-1]), tree)
    crop_cache(cache, 20)
    again, _ = verify_tree(target, cache, int(ids[-1]), tree)
    assert torch.equal(first, again)
    m = profile_verify(target, [0, 1, 4], [4, 20], repeats=1, warmup=0, progress=False)
    assert m["ctxs"] == [4, 20] and all(0 < x < 1e4 for row in m["verify_ms"] for x in row)


def test_a_model_that_refuses_sdpa_loads_with_eager_attention(tmp_path):
    """Gemma2 with logit softcapping: transformers refuses SDPA; the loader falls back to eager, not a raw error."""
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config("gemma2", 6), attn_implementation="eager")
    model.save_pretrained(tmp_path)
    loaded = _load_dir(tmp_path, torch.float32)
    assert loaded.config._attn_implementation in ("eager", "sdpa")
    t = Target(model=loaded.eval(), tokenizer=None, name="g2", fingerprint="g2")
    p = prompt(0, PROMPT, V)
    assert Decoder(t, RandomDrafter(V), method="ddtree", budget=6).generate(p, 12).tokens == \
        reference_greedy(t, p, 12)


def test_a_gguf_of_a_family_without_a_block_map_runs_fp32_by_default(monkeypatch, capsys):
    """A GGUF of a family the native block map does not know (GPT-2 here; transformers reads such files): the default
    `--weights auto` runs its dequantised fp32 weights with one notice line instead of failing; `--weights native`
    refuses in one line. The file itself is stood in for (transformers' GGUF loader is not under test here)."""
    monkeypatch.setattr(tgt, "_gguf_path", lambda spec: Path(spec))
    monkeypatch.setattr(tgt, "_load_model", lambda spec, gguf, dtype: (
        GPT2LMHeadModel(GPT2Config(vocab_size=V, n_embd=32, n_layer=1, n_head=2, n_positions=64)), None, "0" * 16))
    t = tgt.load_target("/nowhere/gpt2-tiny-Q8_0.gguf", device="cpu")
    err = capsys.readouterr().err
    assert t.weights == "fp32" and "gpt2-tiny-Q8_0.gguf is a gpt2 model" in err and len(err.splitlines()) == 1
    if packing_available():
        with pytest.raises(CaddtreeError, match="--weights native supports GGUF files of"):
            tgt.load_target("/nowhere/gpt2-tiny-Q8_0.gguf", device="cpu", weights="native")


@pytest.mark.parametrize("family", FAMILIES)
def test_drafter_init_from_target_computes_the_target_layer_or_refuses(family, tmp_path):
    """DFlash's --init target: the draft layer takes the target layer's layout (Qwen2's q/k/v biases, Qwen3's q/k
    norms) and Phi3's fused projections split into parts, so on a context of two tokens and a block of one (causal
    attention, as the target's last layer computes token 3) it computes the target's hidden state (fails on a
    dropped bias or norm, a wrong split, or RoPE without Llama's llama3 scaling). Gemma2/3 are refused in one line;
    a drafter with biases, norms and the target's RoPE frequencies saves and loads whole."""
    target = tiny(family, None if family not in WINDOWED else 64)
    c = DFlashConfig.for_target(target, num_layers=1, block_size=4)
    model = DFlashModel(c).bind(target)
    if family.startswith("gemma"):
        with pytest.raises(CaddtreeError, match=f"--init target: a {family}(_text)? layer does not map onto"):
            model.init_from_target(target)
        return
    model.init_from_target(target)
    src, layer = target.model.model.layers[-1], model.layers[0]
    assert (c.qkv_bias, c.qk_norm, c.rope_inv_freq is not None) == (family == "qwen2", family == "qwen3",
                                                                    family == "llama")
    assert torch.equal(layer.down_proj.weight, src.mlp.down_proj.weight)
    with torch.no_grad():
        hidden = target.model(torch.tensor([[5, 9, 17]]), output_hidden_states=True).hidden_states
        x = hidden[-2][0]  # [3, H]: the last layer's input; hidden[-1]: its output, final norm applied
        k, v = layer.context_kv(layer.input_layernorm(x[:2]), torch.arange(2))
        y = model.norm(layer(x[2][None, None], torch.tensor([[2]]), k, v))[0, 0]
    torch.testing.assert_close(y, hidden[-1][0, 2], rtol=1e-5, atol=1e-5)
    save_drafter(model, tmp_path / "d")
    again = load_model(tmp_path / "d", target)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))
    p = prompt(0, PROMPT, V)  # and drafts (its linears packed, as on a CPU target) for a decode that stays exact
    drafter = DFlashDrafter(again, pack=packing_available())
    tokens = Decoder(target, drafter, method="ddtree", budget=4).generate(p, NEW).tokens
    assert tokens == reference_greedy(target, p, NEW)


@pytest.mark.parametrize("family, window", [pytest.param(f, w, id=f"{f}-{name}") for f in sorted(WINDOWED)
                                            for name, w in WINDOWS.items()])
def test_windowed_families_are_exact_by_construction_on_the_lean_forward(family, window):
    """Mistral, Phi3 (fused projections), Qwen2 (sliding layers by type), Gemma2 (soft-capped scores) and Gemma3
    (RoPE per layer kind) on the CPU kernels and the lean forward, as `load_target` runs them on CPU: the window is
    applied inside the lean forward (row attention over each layer kind's allowed columns), so exactness is
    'guaranteed', and every method gives the cache-free reference's tokens."""
    if not packing_available():
        pytest.skip("the CPU kernels are not built here")
    target = tiny(family, window, seed=4, hidden_size=64, head_dim=16)  # head_dim 16, as the row kernel takes
    target.packed = pack_linears(target.model) > 0
    target.lean = LeanForward(target.model)
    assert target.exactness == "guaranteed" and target.lean.window == window
    cost = fit_cost_model(TOY_COSTS, {"target_fingerprint": target.fingerprint})
    for seed in (0, 1):
        p = prompt(seed, PROMPT, V)
        want = reference_greedy(target, p, NEW)
        for dec in (Decoder(target), Decoder(target, OracleDrafter(target, seed=seed), method="ddtree", budget=6),
                    Decoder(target, RandomDrafter(V, seed=seed), method="ddtree", budget=8),
                    Decoder(target, OracleDrafter(target, seed=seed), method="caddtree", cost_model=cost)):
            assert dec.generate(p, NEW).tokens == want, (family, window, dec.method, seed)


def test_exactness_is_claimed_only_where_rows_are_computed_alike():
    """fp32 on the CPU kernels with the lean forward's row attention: guaranteed; bf16, PyTorch's linears or
    HF's SDPA: 'not guaranteed' with the reason; the dtype keys the cost profile."""
    t = tiny("llama", None)
    assert t.exactness.startswith("not guaranteed") and "PyTorch's" in t.exactness
    if packing_available():
        t.packed = pack_linears(t.model) > 0
        t.lean = LeanForward(t.model)
        assert t.exactness == ("guaranteed" if t.lean.row_kernel else t.exactness)
    b = Target(model=tiny("qwen3", None).model.to(torch.bfloat16), tokenizer=None, name="b", fingerprint="b")
    assert "bfloat16" in b.exactness and b.exactness.startswith("not guaranteed")
    assert device_label(b).endswith("-bfloat16") and not device_label(t).endswith("float32")
