"""caddtree.lean: the lean forward gives the HF model's logits and features (llama tied / untied with biases and llama3
rope, qwen2 biases, qwen3 qk-norm, mistral, phi3's fused projections, gemma2's four (1 + w) norms, gelu-tanh and
soft-capped attention scores and logits, gemma3's qk-norm and RoPE per layer kind; sliding windows shorter than the
context on every layer (mistral, phi3) or some (qwen2's, gemma's layer types)), its verify rows equal plain steps bit
for bit where that is possible, and greedy decoding through it is the same for ar, ddtree and caddtree.

Timing (not asserted here): `python scripts/step_profile.py` splits one decoding step of SmolLM2 by part.
"""

import numpy as np
import pytest
import torch
from transformers import (Gemma2Config, Gemma3TextConfig, GPT2Config, GPT2LMHeadModel, LlamaConfig, MistralConfig,
                          Phi3Config, Qwen2Config, Qwen3Config)
from transformers import AutoModelForCausalLM

from caddtree.costmodel import CostModel
from caddtree.drafter import PromptLookupDrafter
from caddtree.engine import Decoder
from caddtree.kernels import MAX_ROWS, pack_linears, packing_available
from caddtree.lean import LeanForward, lean_unsupported
from caddtree.target import Target, window_masks
from caddtree.tree import Tree, verify_inputs
from caddtree.verify import commit_path
from conftest import OracleDrafter, RandomDrafter, prompt, reference_greedy

V = 300
WINDOW = 8
SMALL = dict(vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=512, initializer_range=0.3, bos_token_id=0,
             eos_token_id=None, pad_token_id=0, attn_implementation="sdpa")
LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 32}
FAMILIES = {
    "llama-tied-llama3-rope": lambda: LlamaConfig(**SMALL, tie_word_embeddings=True, rope_parameters=LLAMA3_ROPE),
    "llama-untied-biases": lambda: LlamaConfig(**SMALL, tie_word_embeddings=False, attention_bias=True, mlp_bias=True),
    "qwen2": lambda: Qwen2Config(**SMALL, sliding_window=16, use_sliding_window=False),  # window off: full attention
    "qwen3": lambda: Qwen3Config(**SMALL, head_dim=32, tie_word_embeddings=True),  # head_dim != hidden / heads
    "mistral": lambda: MistralConfig(**SMALL | {"intermediate_size": 100}, sliding_window=None),  # 100: vector tails
    # windows of 8 positions: the contexts below reach 20-110, so every forward past the first steps cuts some columns
    "mistral-window": lambda: MistralConfig(**SMALL, sliding_window=WINDOW),
    "qwen2-window": lambda: Qwen2Config(**SMALL, use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1),
    "phi3-window": lambda: Phi3Config(**SMALL, sliding_window=WINDOW, resid_pdrop=0.0),
    # caps small enough to bend the scores (|s| ~ 1-5 here) and the logits; SDPA refuses soft-capping: eager
    "gemma2-window": lambda: Gemma2Config(**SMALL | {"attn_implementation": "eager"}, head_dim=16,
                                          query_pre_attn_scalar=16, sliding_window=WINDOW, attn_logit_softcapping=2.0,
                                          final_logit_softcapping=3.0),
    # local and global RoPE bases differ per layer kind; two sliding layers, one full
    "gemma3-window": lambda: Gemma3TextConfig(**SMALL, head_dim=16, query_pre_attn_scalar=16, sliding_window=WINDOW,
                                              layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                                              final_logit_softcapping=3.0),
}
# a tree over [root, nodes]: chain root -> 0 -> 1 -> 2 (rows 0-3 see a causal prefix), node 3 a second child of the
# root and node 4 its child (rows 4-5 see the cache through gaps)
TREE = Tree(torch.tensor([3, 4, 9, 10, 12]), torch.tensor([-1, 0, 1, -1, 3]), torch.tensor([1, 2, 3, 1, 2]),
            torch.zeros(5, dtype=torch.float64))
CHAIN_ROWS = 4


def make_model(family: str, seed: int = 0):
    """A tiny random model of `family`, biases and norm weights randomised too (HF initialises them to 0 and 1)."""
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(FAMILIES[family]()).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0.0, 0.3)
            elif p.dim() == 1:
                p.uniform_(0.5, 1.5)
    model.generation_config.eos_token_id = None
    return model


def make_target(model, name="tiny") -> Target:
    return Target(model=model, tokenizer=None, name=name, fingerprint=name)


def ids(seed: int, n: int) -> torch.Tensor:
    return torch.randint(2, V, (n,), generator=torch.Generator().manual_seed(seed))


def hf_forward(model, tokens, cache, position_ids=None, attn_mask=None, layers=()):
    """The HF model's own forward under `Target.forward`'s contract (hidden_states[k + 1]: the output of layer k)."""
    ctx, n = cache.get_seq_length(), len(tokens)
    if position_ids is None:
        position_ids = torch.arange(ctx, ctx + n)
    window = make_target(model).window  # the tree mask as Target.forward gives it (the window applied per layer)
    masks = {} if attn_mask is None else {"attention_mask": window_masks(attn_mask, ctx, position_ids, *window,
                                                                         torch.float32)}
    with torch.inference_mode():
        out = model(input_ids=tokens[None], position_ids=position_ids[None], cache=cache, use_cache=True,
                    output_hidden_states=True, **masks)
    return out.logits[0].float(), torch.cat([out.hidden_states[k + 1][0] for k in layers], dim=-1)


def assert_close(got, want, what):
    scale = want.abs().max().item()
    err = (got - want).abs().max().item()
    assert err <= 1e-4 * scale, f"{what}: max error {err:.3g} at scale {scale:.3g}"


@pytest.mark.parametrize("native", [False, True], ids=["python-layers", "cpp-layers"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_lean_matches_hf(family, native):
    """Chunked prefill (the second chunk causal on a non-empty cache), single steps, a tree verify with its ancestor
    mask and depths, compaction of the accepted path, one more step: logits, features and cache as HF's. native: the
    linears packed, so the layers of every forward run in one C++ call (lean_layers.cpp)."""
    model = make_model(family)
    assert lean_unsupported(model) is None
    if family.startswith("llama-tied") or family == "qwen3":
        assert model.lm_head.weight is model.model.embed_tokens.weight
    if native:
        if not packing_available():
            pytest.skip("the CPU kernels are not built here")
        pack_linears(model)
    target, lean = make_target(model), LeanForward(model)
    assert (lean.native is not None) == native and lean.label == ("lean2" if native else "lean")
    layers = [model.config.num_hidden_layers - 1, 0]  # the last one: HF's hidden_states[-1] is after the final norm
    hf_cache, lean_cache = target.new_cache(), target.new_cache()

    def both(tokens, position_ids=None, attn_mask=None):
        want = hf_forward(model, tokens, hf_cache, position_ids, attn_mask, layers)
        got = lean(tokens, lean_cache, position_ids, attn_mask, layers)
        for g, w, what in zip(got, want, ("logits", "features")):
            assert g.shape == w.shape and g.dtype == w.dtype == torch.float32
            assert_close(g, w, f"{family} {what} n={len(tokens)}")
        for a, b in zip(lean_cache.layers, hf_cache.layers):
            assert_close(a.keys, b.keys, "keys")
            assert_close(a.values, b.values, "values")

    both(ids(5, MAX_ROWS + 4))  # more rows than the kernels take: the Python layer loop, then the C++ one on its cache
    p = ids(0, 20)
    both(p[:12])
    both(p[12:])
    for t in p[:3]:
        both(t[None])
    ctx = hf_cache.get_seq_length()
    root = int(p[5])
    tokens, pos, mask = verify_inputs(root, TREE, ctx)
    both(tokens, position_ids=pos, attn_mask=mask)
    for cache in (hf_cache, lean_cache):
        commit_path(cache, ctx, [3, 4], "cpu")  # the branch after the gap
    both(torch.tensor([7]))
    _, none = lean(torch.tensor([8]), target.new_cache())
    assert none is None


def plain_and_tree(model, context: int = 20, lean=None):
    """-> (verify logits [6, V] and features, the plain steps' logits and features of the chain rows, the plain logits
    of the branch's first node): every forward on its own cache after the same prefill of `context` tokens."""
    lean = lean or LeanForward(model)
    layers = [0, 2]
    new = make_target(model).new_cache
    p = ids(1, context)
    caches = [new() for _ in range(3)]
    for c in caches:
        lean(p, c)
    root = 11
    tokens, pos, mask = verify_inputs(root, TREE, len(p))
    tree_logits, tree_feats = lean(tokens, caches[0], pos, mask, layers)
    plain = [lean(t[None], caches[1], hidden_layers=layers) for t in tokens[:CHAIN_ROWS]]  # root, then the chain
    lean(torch.tensor([root]), caches[2])
    branch, _ = lean(tokens[4:5], caches[2])
    return (tree_logits, tree_feats), plain, branch


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_verify_rows_equal_plain_steps_with_packed_linears(family):
    """Batch invariance, bit for bit: the root and the leading chain of a verified tree get exactly the logits and
    features the plain one-token steps give along the same path (caddtree.lean runs those rows' attention as plain
    steps, and the packed linears sum each row the same way whatever the other rows are). A node after the first
    branch sees the cache through masked gaps: with `kernels.row_attention` (CPU, fp32) it too is bit-identical;
    with SDPA only to fp32 rounding."""
    if not packing_available():
        pytest.skip("the CPU linear kernel is not built here")
    model = make_model(family)
    assert pack_linears(model) > 0
    (tree_logits, tree_feats), plain, branch = plain_and_tree(model)
    for i, (logits, feats) in enumerate(plain):
        assert torch.equal(tree_logits[i], logits[0]), f"row {i}"
        assert torch.equal(tree_feats[i], feats[0]), f"row {i}"
    assert LeanForward(model).row_kernel  # the kernels are built here, so the branch row is exact too
    assert LeanForward(model).native is not None  # and every forward here ran the C++ layer loop
    assert torch.equal(tree_logits[4], branch[0]), "branch row"


def test_longrope_rows_take_their_own_frequencies():
    """Phi3's longrope switches every row of a call to its long frequencies once the call's longest position passes
    original_max_position_embeddings (16 here). A verify at context 13 reaches position 16 while its root sits at 13:
    asked row by row, each row gets the frequencies its plain step gets, so the rows stay bit-identical to plain steps
    across the switch (asked once per call, the root and first chain rows would take the long ones)."""
    if not packing_available():
        pytest.skip("the CPU linear kernel is not built here")
    d = SMALL["hidden_size"] // SMALL["num_attention_heads"]
    rope = {"rope_type": "longrope", "rope_theta": 1e4, "short_factor": [1.0] * (d // 2),
            "long_factor": [4.0] * (d // 2), "original_max_position_embeddings": 16}
    FAMILIES["phi3-longrope"] = lambda: Phi3Config(**SMALL, rope_parameters=rope, original_max_position_embeddings=16,
                                                   resid_pdrop=0.0)
    try:
        model = make_model("phi3-longrope")
    finally:
        del FAMILIES["phi3-longrope"]
    assert pack_linears(model) > 0 and LeanForward(model).rope_per_row
    (tree_logits, tree_feats), plain, branch = plain_and_tree(model, context=13)
    for i, (logits, feats) in enumerate(plain):
        assert torch.equal(tree_logits[i], logits[0]), f"row {i}"
    assert torch.equal(tree_logits[4], branch[0]), "branch row"


def test_cpp_layers_write_in_place_only_where_every_cache_layer_has_room():
    """`LeanLayers.has_room`: the C++ loop writes the new KV rows into the buffers only where each layer's cache is
    the first ctx rows of its buffer with room for n more; else `GrowingLayer.reserve` runs first. False on a fresh
    cache, True after a step, False where the buffer is full or a layer's keys are a copy (not a view of it); the
    forward after each still gives the HF model's logits (the cache grown past its first buffer's 256 rows)."""
    if not packing_available():
        pytest.skip("the CPU kernels are not built here")
    model = make_model("llama-untied-biases")
    pack_linears(model)
    target, lean = make_target(model), LeanForward(model)
    cache, hf_cache = target.new_cache(), target.new_cache()

    def room(n: int) -> bool:
        layers = cache.layers
        return lean.native.has_room([c.keys for c in layers], [c.values for c in layers],
                                    [c.buf_k for c in layers], [c.buf_v for c in layers], cache.get_seq_length(), n)

    def step(tokens):
        got, _ = lean(tokens, cache)
        want, _ = hf_forward(model, tokens, hf_cache, layers=[0])
        assert_close(got, want, f"logits at context {cache.get_seq_length()}")

    assert not room(1)
    step(ids(0, 60))
    assert room(1) and not room(cache.layers[0].buf_k.shape[-2])  # no room past the buffer's end
    for i in range(4):  # 60 + 4 x 60 = 300 rows: past the first buffer (256), reserved anew on the way
        step(ids(i + 1, 60))
    assert cache.get_seq_length() == 300 and cache.layers[0].buf_k.shape[-2] > 256 and room(1)
    layer = cache.layers[1]
    layer.keys, layer.values = layer.keys.clone(), layer.values.clone()  # no longer views of their buffers
    assert not room(1)
    step(ids(9, 1))
    assert room(1)


@pytest.mark.parametrize("family", ["llama-tied-llama3-rope", "qwen3", "gemma3-window"])
def test_rope_table_rows_are_the_rotary_modules_own(family):
    """The forward reads cos/sin from a table by position (`_rope_rows`); each row must be what the model's rotary
    module gives for that position alone, bit for bit (llama3 scaling, Gemma3's two bases), for a plain step's
    positions and a verify's, past the first table's 1024 positions (it is remade larger), and the table is in
    use (not silently off)."""
    lean = LeanForward(make_model(family))
    x = torch.zeros(3, SMALL["hidden_size"])
    for ctx, pos in ((0, None), (5, torch.tensor([5, 6, 6])), (1500, None), (2040, torch.tensor([2047, 2048, 2049]))):
        want = pos if pos is not None else torch.arange(ctx, ctx + 3)
        cos, sin = lean._rope_rows(x, ctx, pos)
        assert lean._rope_table is not False
        for i, p in enumerate(want.tolist()):
            c, s = lean._rope(x[:1], torch.tensor([p]))
            assert torch.equal(cos[:, i], c[:, 0]) and torch.equal(sin[:, i], s[:, 0]), f"position {p}"
    assert lean._rope_table[0].shape[1] == 4096


@pytest.mark.parametrize("family", ["mistral-window", "qwen2-window", "phi3-window", "llama-untied-biases"])
def test_sdpa_path_attends_the_chain_rows_as_plain_steps(family):
    """Where the row kernel does not run (CUDA, a head_dim it does not take), a verify's leading chain rows are
    attended one by one with the plain step's own SDPA call over the same cache columns (the window's cut included):
    bit-identical to the plain steps with packed linears; the branch rows (one masked call) to rounding."""
    if not packing_available():
        pytest.skip("the CPU linear kernel is not built here")
    model = make_model(family)
    assert pack_linears(model) > 0
    lean = LeanForward(model, native=False)
    lean.row_kernel = False  # as off the CPU
    (tree_logits, _), plain, branch = plain_and_tree(model, lean=lean)
    for i, (logits, _) in enumerate(plain):
        assert torch.equal(tree_logits[i], logits[0]), f"row {i}"
    assert_close(tree_logits[4], branch[0], "branch row")
    hf = make_target(model)
    with torch.no_grad():
        ref = hf.model(torch.cat([ids(1, 20), torch.tensor([11])])[None]).logits[0, -1]
    assert_close(plain[0][0][0], ref, "plain step against HF")


@pytest.mark.parametrize("family", ["llama-untied-biases", "qwen3"])
def test_verify_rows_close_to_plain_steps_with_torch_linears(family):
    """With the model's nn.Linear (PyTorch's GEMM, MKL here) the rows are only equal to fp32 rounding: the GEMM sums a
    row differently for 1 row and for 6, so no bit-for-bit claim is made (or asserted) without the packed kernel."""
    (tree_logits, _), plain, branch = plain_and_tree(make_model(family))
    for i, (logits, _) in enumerate(plain):
        assert_close(tree_logits[i], logits[0], f"row {i}")
    assert_close(tree_logits[4], branch[0], "branch row")


def test_batched_verify_equals_exact_verify_to_rounding():
    """exact=False attends every row of a verify in one grouped call: the same logits to fp32 rounding."""
    model = make_model("qwen3")
    new = make_target(model).new_cache
    p = ids(2, 20)
    out = []
    for lean in (LeanForward(model), LeanForward(model, exact=False)):
        cache = new()
        lean(p, cache)
        tokens, pos, mask = verify_inputs(11, TREE, len(p))
        out.append(lean(tokens, cache, pos, mask, [1])[0])
    assert_close(out[1], out[0], "batched verify")


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_greedy_decoding_through_lean_is_the_same_for_every_method(family):
    """ar, ddtree (an oracle drafter that reads features, random trees, prompt lookup) and caddtree through the lean
    forward give the tokens plain decoding through HF's forward gives."""
    model = make_model(family, seed=3)
    if packing_available():
        pack_linears(model)
    target = make_target(model)
    p = prompt(3, 16, V)
    expect = reference_greedy(target, p, 32)  # HF's forward, no cache
    lean = LeanForward(model)
    calls = []

    def forward(tokens, cache, position_ids=None, attn_mask=None):
        calls.append(len(tokens))
        return lean(tokens, cache, position_ids, attn_mask, target.hidden_layers)

    target.forward = forward
    cost = CostModel([1], np.r_[10.0, 10.0 + 0.5 * np.arange(1, 17)][None], np.zeros(17), [2.0], [0.0])
    decoders = {"ar": Decoder(target),
                "ddtree-oracle": Decoder(target, OracleDrafter(target, 5, seed=3), method="ddtree", budget=8),
                "ddtree-random": Decoder(target, RandomDrafter(V, 4, seed=3), method="ddtree", budget=12),
                "ddtree-lookup": Decoder(target, PromptLookupDrafter(V, 4), method="ddtree", budget=4),
                "caddtree": Decoder(target, OracleDrafter(target, 5, seed=4), method="caddtree", cost_model=cost)}
    for name, dec in decoders.items():
        assert dec.generate(p, 32).tokens == expect, name
    assert max(calls) > 1 and calls.count(1) >= 32  # the lean forward ran plain steps and tree verifies


def test_unsupported_models_are_named():
    phi = Phi3Config(**SMALL, rope_parameters={"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5})
    assert lean_unsupported(AutoModelForCausalLM.from_config(phi)) == "partial rotary"
    dynamic = LlamaConfig(**SMALL, rope_parameters={"rope_type": "dynamic", "rope_theta": 1e4, "factor": 2.0})
    assert lean_unsupported(AutoModelForCausalLM.from_config(dynamic)).startswith("rope_type dynamic")
    assert lean_unsupported(AutoModelForCausalLM.from_config(LlamaConfig(**SMALL, hidden_act="gelu"))) == \
        "hidden activation gelu"
    bidirectional = Gemma3TextConfig(**SMALL, head_dim=16, use_bidirectional_attention=True)
    assert lean_unsupported(AutoModelForCausalLM.from_config(bidirectional)) == "bidirectional attention"
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=V, n_embd=32, n_layer=1, n_head=2, n_positions=64))
    assert lean_unsupported(gpt2) == "model_type gpt2"
    with pytest.raises(ValueError, match="model_type gpt2"):
        LeanForward(gpt2)
    assert lean_unsupported(make_model("mistral").train()) == "training mode"
