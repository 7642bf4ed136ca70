"""CPU linear kernels (panel, and AMX where the CPU has it): same numbers as nn.Linear, a row's result independent of
the batch, tied weights stay tied, and decoding stays lossless."""
import os
import platform
import shutil
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from caddtree.engine import Decoder
from caddtree.errors import CaddtreeError
from caddtree import kernels
from caddtree.kernels import MAX_ROWS, PackedLinear, kernel_version, pack_linears, packing_available, to_panels
from caddtree.profile import device_label
from conftest import OracleDrafter, RandomDrafter, make_tiny_target, reference_greedy

needs_kernel = pytest.mark.skipif(not packing_available(),
                                  reason="panel kernel not built (no C++ compiler or ninja, or the build failed)")


def _can_build() -> bool:
    """What torch's cpp_extension needs to build the kernel: its C++ compiler ($CXX, else c++) and ninja."""
    from torch.utils.cpp_extension import is_ninja_available
    return shutil.which(os.environ.get("CXX", "c++")) is not None and is_ninja_available()


def test_a_build_lock_left_by_a_killed_build_does_not_hang_the_next_load(tmp_path, monkeypatch, capsys):
    """torch's cpp_extension waits forever on a `lock` file that a build killed midway left behind (seen: a benchmark
    stopped during its first compile hung the next run for 12 minutes). The loader removes it under its own OS lock.
    torch's `load` is replaced by a stand-in that fails the way a wait would not: it asserts the lock is gone."""
    monkeypatch.setattr(kernels, "cache_dir", lambda: tmp_path)
    seen = {}

    def fake_load(name, build_directory, **kwargs):
        seen["lock"] = (Path(build_directory) / "lock").exists()
        return "module"

    monkeypatch.setattr(kernels, "load", fake_load)
    build = kernels._build_dir()
    assert build.parent == tmp_path / "kernels"
    build.mkdir(parents=True)
    (build / "lock").touch()  # what a killed build leaves
    assert kernels._library.__wrapped__() == "module"
    assert seen == {"lock": False}
    assert "stale build lock" in capsys.readouterr().err


@pytest.mark.skipif(not _can_build(), reason="no C++ compiler or no ninja: the kernel tests skip by design")
def test_kernel_builds_where_a_compiler_and_ninja_are_present():
    """Where the kernel can be built it must be: a broken build would otherwise pass as the kernel tests' skips."""
    if packing_available():
        return
    kernels._library.cache_clear()  # build again to name the reason (the first warning went out at collection)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        available = packing_available()
    assert available, "panel kernel not built although c++ and ninja are present: " + "; ".join(
        str(w.message) for w in seen)
HAS_AMX = kernels.amx_available()
KINDS = ["panel", pytest.param("amx", marks=pytest.mark.skipif(not HAS_AMX, reason="no AMX on this CPU"))]
TOLERANCE = {"panel": 1e-5, "amx": 1e-4}  # AMX: bf16 hi/lo split, ~1e-5 relative error


@needs_kernel
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("rows", [1, 2, 7, 17, 33, MAX_ROWS + 1])
def test_packed_linear_matches_linear(rows, kind):
    torch.manual_seed(rows)
    lin = nn.Linear(50, 83, bias=rows % 2 == 0)  # 83 outputs: a clipped panel and column tile; 50 inputs: padded K
    original = lin.weight.detach().clone()
    packed = PackedLinear(lin.weight, lin.bias, kind)
    assert torch.equal(lin.weight, original)  # the weight itself is left as it was
    x = torch.randn(1, rows, 50)
    with torch.inference_mode():
        got, want = packed(x), F.linear(x, original, lin.bias)
    assert got.shape == want.shape == (1, rows, 83)
    torch.testing.assert_close(got, want, rtol=TOLERANCE[kind], atol=TOLERANCE[kind])


@needs_kernel
@pytest.mark.parametrize("kind", KINDS)
def test_packed_linear_rows_are_batch_invariant(kind):
    """A row's output does not depend on which other rows share the call: plain steps (1 row) and tree verification
    (many rows) compute a token's logits the same way, bit for bit. 37 rows: three AMX row tiles, the last partial."""
    torch.manual_seed(0)
    packed = PackedLinear(torch.randn(200, 40), kind=kind)
    x = torch.randn(37, 40)
    with torch.inference_mode():
        batched = packed(x)
        alone = torch.cat([packed(x[i:i + 1]) for i in range(37)])
        pairs = torch.cat([packed(x[i:i + 2]) for i in range(0, 36, 2)])
    assert torch.equal(batched, alone) and torch.equal(batched[:36], pairs)


@needs_kernel
@pytest.mark.parametrize("kind", KINDS)
def test_packed_linear_same_bits_on_more_threads(kind):
    """Threads split the panels, never a sum: the result does not depend on the thread count."""
    torch.manual_seed(1)
    packed = PackedLinear(torch.randn(1000, 64), kind=kind)
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


@pytest.mark.parametrize("width", [64, 16, 8])
def test_panels_layout(width):
    w = torch.arange(70 * 3, dtype=torch.float32).view(70, 3)
    p = to_panels(w, width)
    blocks, last = -(-70 // width), 70 - (70 // width) * width
    assert p.shape == (blocks, 3, width)
    assert torch.equal(p[-1, 2, :last], w[70 - last:, 2]) and not p[-1, :, last:].any()  # zero padding past N
    assert torch.equal(p[0, 1], w[:width, 1])


@needs_kernel
def test_panel_width_matches_the_vector_registers():
    """A panel 6 rows of accumulators wide must fit the registers: 64 columns only where AVX-512 gives 32 zmm."""
    flags = open("/proc/cpuinfo").read() if Path("/proc/cpuinfo").exists() else ""
    if platform.machine() in ("x86_64", "AMD64"):
        assert kernels.panel_width() == (64 if " avx512f" in flags else 16 if " avx" in flags else 8)
    else:
        assert kernels.panel_width() in (16, 64)


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
    torch.testing.assert_close(x.grad, model.lm_head.weight.detach().sum(0).expand(3, -1))  # d(sum xWᵀ)/dx


@needs_kernel
def test_packed_target_has_its_own_profile_label():
    assert device_label(make_tiny_target(0, pack=True)).endswith(f"-{kernel_version()}")
    assert not device_label(make_tiny_target(0)).endswith(f"-{kernel_version()}")


def test_kernel_choice_from_the_environment(monkeypatch):
    kernels._kind.cache_clear()
    try:
        monkeypatch.delenv("CADDTREE_CPU_KERNEL", raising=False)
        assert kernels._kind() == "panel" and kernel_version() == "panel3"  # AMX is opt-in
        kernels._kind.cache_clear()
        monkeypatch.setenv("CADDTREE_CPU_KERNEL", "amx" if HAS_AMX else "panel")
        assert kernel_version() == ("amx2" if HAS_AMX else "panel3")
        kernels._kind.cache_clear()
        monkeypatch.setenv("CADDTREE_CPU_KERNEL", "fast")
        with pytest.raises(CaddtreeError, match="use panel \\(default\\) or amx"):
            kernels._kind()
        if not HAS_AMX:
            kernels._kind.cache_clear()
            monkeypatch.setenv("CADDTREE_CPU_KERNEL", "amx")
            with pytest.raises(CaddtreeError, match="no AMX"):
                kernels._kind()
    finally:
        kernels._kind.cache_clear()


@needs_kernel
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", range(3))
def test_packed_tree_decoding_equals_plain_greedy(seed, kind, monkeypatch):
    monkeypatch.setattr(kernels, "_kind", lambda: kind)
    target = make_tiny_target(seed, pack=True)
    assert {m.kind for m in target.model.modules() if isinstance(m, PackedLinear)} == {kind}
    assert target.packed
    p = torch.randint(2, 64, (12,), generator=torch.Generator().manual_seed(seed))
    expect = reference_greedy(make_tiny_target(seed), p, 32)  # unpacked, cache-free ground truth
    assert Decoder(target).generate(p, 32).tokens == expect
    for d in (OracleDrafter(target, num_positions=5, seed=seed), RandomDrafter(64, num_positions=4, seed=seed)):
        for budget in (4, 16):
            assert Decoder(target, d, method="ddtree", budget=budget).generate(p, 32).tokens == expect


@needs_kernel
@pytest.mark.parametrize("kind", KINDS)
def test_packed_linear_deep_copies(kind):
    import copy
    lin = nn.Linear(16, 24)
    packed = PackedLinear(lin.weight, lin.bias, kind)
    clone = copy.deepcopy(packed)
    assert clone.weight is not packed.weight and clone.kind == kind
    x = torch.randn(4, 16)
    with torch.inference_mode():
        torch.testing.assert_close(clone(x), packed(x))


def test_unbuildable_kernel_falls_back_with_a_warning(tmp_path, monkeypatch):
    from caddtree import kernels
    broken = tmp_path / "panel_linear.cpp"
    broken.write_text("#error no compiler for this test\n")
    monkeypatch.setenv("CADDTREE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(kernels, "_SOURCES", [broken])
    kernels._library.cache_clear()
    try:
        with pytest.warns(UserWarning, match="CPU linear kernel not built"):
            assert not packing_available()
        model = make_tiny_target(0).model
        assert pack_linears(model) == 0 and type(model.lm_head) is nn.Linear  # PyTorch's linears stay
    finally:
        kernels._library.cache_clear()


@needs_kernel
@pytest.mark.parametrize("cap", [0.0, 1.0], ids=["plain", "softcapped"])
def test_row_attention_matches_softmax_attention_and_each_row_is_its_own(cap):
    """Each query row attends its allowed columns alone: the same result as a softmax over exactly those columns
    (GQA: query head i reads KV head i // r), and bit-identical to the same row run alone against just those keys and
    values in cache order — a tree node equals the plain step that would decode it. Masked columns change nothing.
    cap > 0: the scores soft-capped first, cap · tanh(s / cap) (Gemma2), which changes the result."""
    torch.manual_seed(0)
    g, h, d, L, n = 2, 6, 32, 70, 6
    buf_k, buf_v = torch.randn(g, 128, d), torch.randn(g, 128, d)  # a cache buffer with spare room, as GrowingLayer
    k, v = buf_k[:, :L], buf_v[:, :L]
    q = torch.randn(n, h, d)
    allowed = torch.zeros(n, L, dtype=torch.bool)
    allowed[:, :L - n] = True
    for i, ancestors in enumerate([[], [0], [0, 1], [0, 2], [0, 1, 2, 4], [0, 1, 2, 4, 5]]):  # a tree: gaps
        allowed[i, [L - n + a for a in ancestors] + [L - n + i]] = True
    got = kernels.row_attention(q, k, v, allowed, 0.125, cap)
    for i in range(n):
        cols = allowed[i].nonzero()[:, 0]
        kc, vc = k[:, cols].repeat_interleave(h // g, 0), v[:, cols].repeat_interleave(h // g, 0)  # [h, C, d]
        s = (kc @ q[i][:, :, None])[..., 0] * 0.125  # [h, C]
        want = torch.softmax(cap * torch.tanh(s / cap) if cap else s, -1)[:, None] @ vc  # [h, 1, d]
        torch.testing.assert_close(got[i], want[:, 0], rtol=1e-5, atol=1e-6)
        alone = kernels.row_attention(q[i:i + 1], k[:, cols].contiguous(), v[:, cols].contiguous(), None, 0.125, cap)
        assert torch.equal(alone[0], got[i]), i
    causal = kernels.row_attention(q, k, v, None, 0.125, cap)  # no mask: row i sees columns 0 .. L - n + i
    for i in range(n):
        assert torch.equal(causal[i], kernels.row_attention(q[i:i + 1], k[:, :L - n + i + 1], v[:, :L - n + i + 1],
                                                            None, 0.125, cap)[0])
    if cap:
        assert (got - kernels.row_attention(q, k, v, allowed, 0.125)).abs().max() > 1e-3


@pytest.mark.skipif(not packing_available(), reason="the CPU kernels are not built here")
@pytest.mark.parametrize("V", [1, 15, 16, 49152, 49157])
def test_row_argmax_picks_what_torch_argmax_picks(V):
    """The decoder's greedy choice (sample.cpp's row_argmax) is torch.argmax's on every row: the first of tied maxima
    (also across the 16-wide blocks and in the tail past them), -inf rows, -0.0 against 0.0, a NaN wherever it sits
    (torch counts it above every number), and fp16/bf16 logits (widened exactly)."""
    g = torch.Generator().manual_seed(V)
    x = torch.randn(12, V, generator=g)
    x[1] = x[1].round()                         # many ties
    x[2, :] = float("-inf")
    x[3, :] = 0.0
    x[3, V // 2] = -0.0                         # equal to 0.0: the first entry still wins
    x[4, V - 1] = float("nan")                  # NaN in the tail
    x[5, 0] = float("nan")
    x[5, V // 3] = float("nan")
    x[6, :] = x[6, 0]                           # all tied
    x[7, V - 1] = 1e30                          # maximum in the last entry
    x[8] = x[8].clamp(max=0.5)                  # ties at the clamp
    x[9, V // 2] = float("inf")
    x[10] = x[10].to(torch.bfloat16).float()
    for rows in (x, x[:1], x[9:]):
        assert torch.equal(kernels.row_argmax(rows), rows.argmax(-1))
    for dtype in (torch.float16, torch.bfloat16):
        half = x[6:].to(dtype)
        assert torch.equal(kernels.row_argmax(half), half.argmax(-1))
