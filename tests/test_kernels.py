"""Panel-kernel CPU linears: same numbers as nn.Linear, a row's result independent of the batch, tied weights stay
tied, and decoding stays lossless."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from caddtree.engine import Decoder
from caddtree.kernels import KERNELS, MAX_ROWS, PackedLinear, pack_linears, packing_available, to_panels
from caddtree.profile import device_label
from conftest import OracleDrafter, RandomDrafter, make_tiny_target, reference_greedy

needs_kernel = pytest.mark.skipif(not packing_available(), reason="panel kernel not built (no C++ compiler)")


@needs_kernel
@pytest.mark.parametrize("rows", [1, 2, 7, 33, MAX_ROWS + 1])
def test_packed_linear_matches_linear(rows):
    torch.manual_seed(rows)
    lin = nn.Linear(48, 80, bias=rows % 2 == 0)  # 80 outputs: one full panel and one clipped
    original = lin.weight.detach().clone()
    packed = PackedLinear(lin.weight, lin.bias)
    assert torch.equal(lin.weight, original)  # the weight itself is left as it was
    x = torch.randn(1, rows, 48)
    with torch.inference_mode():
        got, want = packed(x), F.linear(x, original, lin.bias)
    assert got.shape == want.shape == (1, rows, 80)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@needs_kernel
def test_packed_linear_rows_are_batch_invariant():
    """A row's output does not depend on which other rows share the call: plain steps (1 row) and tree verification
    (many rows) compute a token's logits the same way, bit for bit."""
    torch.manual_seed(0)
    packed = PackedLinear(torch.randn(200, 40))
    x = torch.randn(13, 40)
    with torch.inference_mode():
        batched = packed(x)
        alone = torch.cat([packed(x[i:i + 1]) for i in range(13)])
        pairs = torch.cat([packed(x[i:i + 2]) for i in range(0, 12, 2)])
    assert torch.equal(batched, alone) and torch.equal(batched[:12], pairs)


@needs_kernel
def test_packed_linear_same_bits_on_more_threads():
    """Threads split the panels, never a sum: the result does not depend on the thread count."""
    torch.manual_seed(1)
    packed = PackedLinear(torch.randn(1000, 64))
    x = torch.randn(9, 64)
    threads = torch.get_num_threads()
    try:
        with torch.inference_mode():
            one = packed(x)
            torch.set_num_threads(2)
            two = packed(x)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, two)


def test_panels_layout():
    w = torch.arange(70 * 3, dtype=torch.float32).view(70, 3)
    p = to_panels(w)
    assert p.shape == (2, 3, 64)
    assert torch.equal(p[1, 2, :6], w[64:, 2]) and not p[1, :, 6:].any()  # zero padding past N


@needs_kernel
def test_pack_keeps_tied_weights_and_training_falls_back():
    target = make_tiny_target(0)
    model = target.model
    model.config.tie_word_embeddings = True
    model.lm_head.weight = model.model.embed_tokens.weight
    n = pack_linears(model)
    assert n == 2 * 7 + 1  # 7 linears per layer + the LM head
    assert isinstance(model.lm_head, PackedLinear)
    assert model.get_output_embeddings().weight is model.model.embed_tokens.weight
    ids = torch.tensor([[3, 5]])
    torch.testing.assert_close(model.model.embed_tokens(ids)[0], model.lm_head.weight[[3, 5]])  # lookups still right
    x = torch.randn(3, 32, requires_grad=True)
    model.lm_head(x).sum().backward()  # grad mode: plain F.linear, so autograd still works
    assert x.grad is not None


@needs_kernel
def test_packed_target_has_its_own_profile_label():
    assert device_label(make_tiny_target(0, pack=True)).endswith(f"-{KERNELS}")
    assert not device_label(make_tiny_target(0)).endswith(f"-{KERNELS}")


@needs_kernel
@pytest.mark.parametrize("seed", range(3))
def test_packed_tree_decoding_equals_plain_greedy(seed):
    target = make_tiny_target(seed, pack=True)
    assert target.packed
    p = torch.randint(2, 64, (12,), generator=torch.Generator().manual_seed(seed))
    expect = reference_greedy(make_tiny_target(seed), p, 32)  # unpacked, cache-free ground truth
    assert Decoder(target).generate(p, 32).tokens == expect
    for d in (OracleDrafter(target, num_positions=5, seed=seed), RandomDrafter(64, num_positions=4, seed=seed)):
        for budget in (4, 16):
            assert Decoder(target, d, method="ddtree", budget=budget).generate(p, 32).tokens == expect


@needs_kernel
def test_packed_linear_deep_copies():
    import copy
    lin = nn.Linear(16, 24)
    packed = PackedLinear(lin.weight, lin.bias)
    clone = copy.deepcopy(packed)
    assert clone.weight is not packed.weight
    x = torch.randn(4, 16)
    with torch.inference_mode():
        torch.testing.assert_close(clone(x), packed(x))


def test_unbuildable_kernel_falls_back_with_a_warning(tmp_path, monkeypatch):
    from caddtree import kernels
    broken = tmp_path / "panel_linear.cpp"
    broken.write_text("#error no compiler for this test\n")
    monkeypatch.setenv("CADDTREE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(kernels, "_SOURCE", broken)
    kernels._library.cache_clear()
    try:
        with pytest.warns(UserWarning, match="CPU linear kernel not built"):
            assert not packing_available()
        model = make_tiny_target(0).model
        assert pack_linears(model) == 0 and type(model.lm_head) is nn.Linear  # PyTorch's linears stay
    finally:
        kernels._library.cache_clear()
