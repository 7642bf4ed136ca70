"""Exactness in bf16 and fp16 on CPU: a half-precision model's linears run on `kernels.half_linear` (its own weight
rows, widened to fp32 exactly, summed in fp32, each row alone) and the lean forward's attention on `row_attention`
(widened, rounded back once), so a tree verify computes every row as the plain step does, bit for bit, and every
decoding method is token-identical to plain decoding. PyTorch's bf16 GEMM is not batch-invariant, so without these
kernels the claim is "not guaranteed" (tests/test_families.py).
"""
import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import AutoModelForCausalLM, LlamaConfig, PreTrainedTokenizerFast

from caddtree.costmodel import fit_cost_model
from caddtree.engine import Decoder
from caddtree.kernels import HALF_TYPES, MAX_ROWS, QuantLinear, half_linear, pack_linears, packing_available
from caddtree.lean import LeanForward
from caddtree.target import Target, load_target
from conftest import TOY_COSTS, OracleDrafter, RandomDrafter, prompt
from test_lean import FAMILIES, V, make_model, plain_and_tree

pytestmark = pytest.mark.skipif(not packing_available(), reason="CPU kernels not built (no C++ compiler or ninja)")
DTYPES = [torch.bfloat16, torch.float16]
# test_lean's families but mistral, whose test config has a 100-wide MLP (tails for the fp32 kernels) that half_linear
# leaves to PyTorch (the not-guaranteed case: test_load_target_in_bf16...); its layers are Llama's
HALF_FAMILIES = sorted(f for f in FAMILIES if f != "mistral")


def half_model(family: str, dtype: torch.dtype, seed: int = 0):
    model = make_model(family, seed).to(dtype)
    assert pack_linears(model) > 0 and not any(type(m) is torch.nn.Linear for m in model.modules())
    return model


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_half_linear_reads_the_weights_in_place_and_rows_are_batch_invariant(dtype):
    """The weight rows are the kernel's blocks without a copy, they widen to fp32 exactly, a row's output is the same
    bits whatever rows share the call (1..96, either thread count), and equals fp32 math rounded once to the dtype."""
    torch.manual_seed(0)
    w, bias = torch.randn(83, 96).to(dtype), torch.randn(83).to(dtype)
    lin = half_linear(w, bias)
    assert type(lin) is QuantLinear and lin.kernel_type == HALF_TYPES[dtype]
    assert lin.rows.data_ptr() == w.data_ptr() and torch.equal(lin.dequantized(), w.float())
    x = torch.randn(MAX_ROWS, 96).to(dtype)
    saved = torch.get_num_threads()
    try:
        with torch.inference_mode():
            torch.set_num_threads(1)
            alone = torch.cat([lin(x[i:i + 1]) for i in range(MAX_ROWS)])
            assert alone.dtype == dtype
            ref = (x.float() @ w.float().T + bias.float()).to(dtype)
            torch.testing.assert_close(alone, ref, rtol=1e-2, atol=1e-2)
            for threads in (1, 2):
                torch.set_num_threads(threads)
                for m in (2, 5, 7, 31, MAX_ROWS):
                    assert torch.equal(lin(x[-m:]), alone[-m:]), (m, threads)
            assert lin(x[:1].float()).dtype == torch.float32  # an fp32 input stays fp32
    finally:
        torch.set_num_threads(saved)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("family", HALF_FAMILIES)
def test_half_precision_verify_rows_equal_plain_steps(family, dtype):
    """As tests/test_lean.py's fp32 test: the root and chain of a verified tree, and a node after a branch (its cache
    seen through masked gaps), get exactly the logits and features of the plain steps along the same path."""
    model = half_model(family, dtype)
    lean = LeanForward(model)
    assert lean.row_kernel and lean.native is None  # the Python layer loop, kernels for linears and attention
    (tree_logits, tree_feats), plain, branch = plain_and_tree(model)
    assert tree_feats.dtype == dtype
    for i, (logits, feats) in enumerate(plain):
        assert torch.equal(tree_logits[i], logits[0]), f"row {i}"
        assert torch.equal(tree_feats[i], feats[0]), f"row {i}"
    assert torch.equal(tree_logits[4], branch[0]), "branch row"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("family", HALF_FAMILIES)
def test_half_precision_decoding_is_token_identical_for_every_method(family, dtype):
    """ddtree (oracle and random drafters) and caddtree equal plain decoding token for token; the model is the HF
    model in that dtype: its first-token logits are as close to the fp32 model's as HF's own forward in that dtype
    (within 1.5x its error, plus 1% of the logits' scale: Gemma's soft-capped logits on these tiny models are as noisy
    in bf16 as their range, 3.0, is small); exactness 'guaranteed'."""
    fp32 = make_model(family, seed=3)
    model = half_model(family, dtype, seed=3)
    target = Target(model=model, tokenizer=None, name="tiny", fingerprint="tiny", packed=True,
                    lean=LeanForward(model))
    assert target.exactness == "guaranteed"
    p = prompt(3, 16, V)
    with torch.inference_mode():
        hf = model(p[None]).logits[0, -1].float()
        ours, _ = target.forward(p, target.new_cache())
        ref = fp32(p[None]).logits[0, -1]
    scale = ref.abs().max().item()
    assert (ours[-1] - ref).abs().max().item() <= 1.5 * (hf - ref).abs().max().item() + 0.01 * scale
    cost = fit_cost_model(TOY_COSTS, {"target_fingerprint": target.fingerprint})
    plain = Decoder(target).generate(p, 32).tokens
    decoders = {"ddtree-oracle": Decoder(target, OracleDrafter(target, 5, seed=3), method="ddtree", budget=8),
                "ddtree-random": Decoder(target, RandomDrafter(V, 4, seed=3), method="ddtree", budget=12),
                "caddtree": Decoder(target, OracleDrafter(target, 5, seed=4), method="caddtree", cost_model=cost)}
    rounds = []
    for name, dec in decoders.items():
        res = dec.generate(p, 32)
        assert res.tokens == plain, name
        rounds += res.rounds
    assert any(r.accepted > 0 for r in rounds) and any(r.accepted < r.tree_size for r in rounds)


def test_load_target_in_bf16_runs_every_linear_on_the_kernel(tmp_path):
    """`load_target(dir, dtype=bfloat16)` on CPU: every linear a half_linear over the loaded weights, the lean forward
    with row attention, exactness 'guaranteed'; a width that is not a multiple of 32 keeps PyTorch's linear, and
    the target says 'not guaranteed' (naming the dtype)."""
    torch.manual_seed(0)
    cfg = dict(vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=True)
    words = Tokenizer(models.WordLevel({f"t{i}": i for i in range(V)}, unk_token="t0"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    for name, inter in (("ok", 128), ("odd", 100)):
        AutoModelForCausalLM.from_config(LlamaConfig(**cfg | {"intermediate_size": inter})).save_pretrained(
            tmp_path / name)
        PreTrainedTokenizerFast(tokenizer_object=words, unk_token="t0").save_pretrained(tmp_path / name)
        target = load_target(str(tmp_path / name), dtype=torch.bfloat16, device="cpu")
        assert target.dtype == torch.bfloat16
        if name == "ok":
            assert target.packed and target.exactness == "guaranteed"
            assert all(type(m) is not torch.nn.Linear for m in target.model.modules())
        else:
            assert not target.packed and target.exactness.startswith("not guaranteed")
            assert "bfloat16" in target.exactness
        p = prompt(1, 10, V)
        assert Decoder(target, RandomDrafter(V, 4), method="ddtree", budget=8).generate(p, 12).tokens == \
            Decoder(target).generate(p, 12).tokens
