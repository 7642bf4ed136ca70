"""Native GGUF weights: the block kernel (quant_linear.cpp) reads ggml blocks as stored and computes in fp32.

What must hold: its weights are gguf-py's dequantized values bit for bit (so native and fp32 are the same model), a
row's result does not depend on how many rows share the call (plain steps and tree verification compute a token's
logits alike), in every build this CPU can run (AVX-512, AVX2, scalar), on 1 or 2 threads; and decoding with it is
lossless, on SmolLM2's file (test_smollm2.py) and on tiny Gemma2 / Gemma3 / Phi3 files written here.
"""
import os
import shutil

import gguf
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFReader, GGUFWriter, quants
from torch import nn
from transformers import AutoModelForCausalLM, Gemma2Config, Gemma3TextConfig, LlamaConfig, Phi3Config
from torch.utils.cpp_extension import is_ninja_available, load

from caddtree import kernels
from caddtree.costmodel import fit_cost_model
from caddtree.engine import Decoder
from caddtree.files import cpu_tag
from caddtree.gguf_weights import block_rows, kernel_blocks, use_gguf_blocks
from caddtree.kernels import (BLOCK_BYTES, GGML_TYPES, MAX_ROWS, REPACKED_TYPES, QuantLinear, fuse_linears,
                              packing_available, to_q8s)
from caddtree.lean import LeanForward
from caddtree.target import Target
from conftest import TOY_COSTS, OracleDrafter, RandomDrafter, make_tiny_target, reference_greedy

needs_kernel = pytest.mark.skipif(not packing_available(), reason="CPU kernels not built (no C++ compiler or ninja)")
TYPES = list(GGML_TYPES)


def random_blocks(kind: str, n: int, k: int, seed: int = 0):
    """(blocks [n, k/32 · bytes] uint8, W [n, k] fp32 = gguf-py's dequantization of them)."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((n, k)) * rng.uniform(0.01, 2.0, (n, 1))).astype(np.float32)
    q = quants.quantize(w, GGMLQuantizationType[kind])
    blocks = np.ascontiguousarray(q).view(np.uint8).reshape(n, -1)
    ref = quants.dequantize(blocks, GGMLQuantizationType[kind]).reshape(n, k).astype(np.float32)
    return torch.from_numpy(blocks.copy()), torch.from_numpy(ref.copy())


@needs_kernel
@pytest.mark.parametrize("kind", TYPES)
def test_blocks_dequantize_to_gguf_values_bit_for_bit(kind):
    blocks, ref = random_blocks(kind, 37, 96)
    assert blocks.shape[1] == 3 * BLOCK_BYTES[GGML_TYPES[kind]]
    assert torch.equal(QuantLinear(blocks, GGML_TYPES[kind], 96).dequantized(), ref)


@needs_kernel
@pytest.mark.parametrize("kind", TYPES)
@pytest.mark.parametrize("rows", [1, 5, 6, 7, 33, MAX_ROWS, MAX_ROWS + 1])
def test_quant_linear_matches_fp32_linear(kind, rows):
    blocks, w = random_blocks(kind, 83, 160, seed=rows)  # 83 outputs: a partial strip
    bias = torch.randn(83)
    lin = QuantLinear(blocks, GGML_TYPES[kind], 160, bias, weight=w)
    x = torch.randn(rows, 160)
    with torch.inference_mode():
        torch.testing.assert_close(lin(x), F.linear(x, w, bias), rtol=1e-5, atol=1e-4)


def _check_invariance(linear_fn, blocks, kind, k, threads=(1, 2), t=None):
    """Rows 1..96 (both sides of the kernel's path and group boundaries: 4/5 rows, groups of 8), any split of them, any
    thread count: every row bit-identical to that row alone. t: the kernel type (default: `kind`'s)."""
    torch.manual_seed(1)
    x = torch.randn(MAX_ROWS, k)
    t = t or GGML_TYPES[kind]
    saved = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        alone = torch.cat([linear_fn(x[i:i + 1].contiguous(), blocks, t) for i in range(MAX_ROWS)])
        for n_threads in threads:
            torch.set_num_threads(n_threads)
            for m in (2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 16, 17, 31, 64, MAX_ROWS):  # both sides of each pass
                for start in (0, MAX_ROWS - m):
                    got = linear_fn(x[start:start + m].contiguous(), blocks, t)
                    assert torch.equal(got, alone[start:start + m]), (kind, m, start, n_threads)
    finally:
        torch.set_num_threads(saved)


@needs_kernel
@pytest.mark.parametrize("kind", TYPES)
def test_quant_rows_are_batch_invariant_on_any_thread_count(kind):
    blocks, _ = random_blocks(kind, 203, 128)
    _check_invariance(kernels._library().quant_linear, blocks, kind, 128)


def raw_blocks(kind: str, n: int, k: int, seed: int = 0) -> np.ndarray:
    """[n, row bytes] uint8: random blocks of a GGUF type gguf-py cannot quantize to (the K types), random bytes with
    their fp16 scales set to small normal values (no inf or NaN); gguf-py's quantizer for the others."""
    rng = np.random.default_rng(seed)
    if kind in ("Q5_0", "Q5_1"):
        w = (rng.standard_normal((n, k)) * rng.uniform(0.01, 2.0, (n, 1))).astype(np.float32)
        return np.ascontiguousarray(quants.quantize(w, GGMLQuantizationType[kind])).view(np.uint8).reshape(n, -1)
    size, nbytes = GGML_QUANT_SIZES[GGMLQuantizationType[kind]]
    b = rng.integers(0, 256, (n * k // size, nbytes), dtype=np.uint8)
    for at in ((0, 2) if kind in ("Q4_K", "Q5_K") else (208,)):  # d, dmin / Q6_K's d
        b[:, at:at + 2] = (rng.standard_normal((len(b), 1)) * 1e-3).astype(np.float16).view(np.uint8)
    return b.reshape(n, -1)


def repacked(kind: str, n: int, k: int, seed: int = 0):
    """(QuantLinear on `kind`'s blocks as `kernel_blocks` converts them, W [n, k] = gguf-py's dequantization)."""
    b = raw_blocks(kind, n, k, seed)
    w = torch.from_numpy(quants.dequantize(b, GGMLQuantizationType[kind]).reshape(n, k).astype(np.float32))
    rows, layout = kernel_blocks(torch.from_numpy(b.copy()), kind, k)
    return QuantLinear(rows, REPACKED_TYPES[kind], k, weight=w, kernel_type=layout), w


@needs_kernel
@pytest.mark.parametrize("kind", list(REPACKED_TYPES))
def test_repacked_types_are_gguf_values_bit_for_bit_and_batch_invariant(kind):
    """Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, repacked at load (as Q5_0S, Q5_1S, Q4_1S, Q5_1S, Q8S): every weight is
    gguf-py's value to the bit (signed zeros included), a linear on them matches F.linear on those values, and each
    row's result is that row's alone, on 1 and 2 threads."""
    lin, w = repacked(kind, 40, 512)
    got = lin.dequantized()
    assert torch.equal(got.view(torch.int32), w.view(torch.int32)), kind
    x = torch.randn(7, 512)
    with torch.inference_mode():
        torch.testing.assert_close(lin(x), F.linear(x, w), rtol=1e-5, atol=1e-4)
    _check_invariance(kernels._library().quant_linear, lin.rows, kind, 512, t=lin.kernel_type)


@needs_kernel
def test_mixed_block_types_fuse_as_q8s_bit_for_bit():
    """q/k/v stored in different types (a file's usual mix): `cat_rows` rewrites Q4_0S, Q4_1S, Q5_0S, Q5_1S and Q8_0
    parts as Q8S (`to_q8s`) so the fused call stays one kernel call, and every output equals its part's own, bit for
    bit."""
    k = 256
    parts = [QuantLinear(random_blocks(kind, n, k, seed=n)[0], GGML_TYPES[kind], k, torch.randn(n) if n != 16 else None)
             for kind, n in (("Q4_1", 32), ("Q4_0", 16), ("Q8_0", 24))] + \
        [repacked(kind, 8, k, seed=i)[0] for i, kind in enumerate(("Q6_K", "Q5_0", "Q5_1"))]
    fused = fuse_linears(parts)
    assert type(fused) is QuantLinear and fused.kernel_type == 108 and fused.out_features == 96
    for p in parts:
        assert torch.equal(kernels._library().quant_dequantize(to_q8s(p.rows, p.kernel_type), 108, k),
                           p.dequantized())
    for m in (1, 3, 5, 9):
        x = torch.randn(m, k)
        with torch.inference_mode():
            assert torch.equal(fused(x), torch.cat([p(x) for p in parts], -1)), m


BINDING = """#include <torch/extension.h>
torch::Tensor quant_linear(torch::Tensor x, torch::Tensor blocks, int64_t type);
std::tuple<torch::Tensor, int64_t> quant_repack(torch::Tensor blocks, int64_t type, int64_t K);
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("quant_linear", &quant_linear); m.def("quant_repack", &quant_repack); }
"""
ISA = {"avx2": ["-march=haswell"], "scalar": ["-march=x86-64", "-mno-avx", "-mno-f16c", "-mno-fma"]}


@pytest.mark.skipif(not (shutil.which(os.environ.get("CXX", "c++")) and is_ninja_available()), reason="no compiler")
@pytest.mark.skipif(not cpu_tag().startswith("x86"), reason="x86 builds")
@pytest.mark.parametrize("isa", list(ISA))
def test_other_builds_agree_and_are_batch_invariant(isa, tmp_path):
    """The AVX2 and scalar variants (what an AVX2-only or older CPU builds) compute the same weights, within fp32
    rounding of the native build, and are batch-invariant too. Skipped where this CPU cannot run the variant."""
    if isa == "avx2" and "avx2" not in cpu_tag():
        pytest.skip("this CPU has no AVX2")
    (tmp_path / "binding.cpp").write_text(BINDING)
    mod = load(name=f"caddtree_quant_{isa}", sources=[str(tmp_path / "binding.cpp"),
                                                      str(kernels._SOURCES[1])],
               build_directory=str(tmp_path), extra_cflags=["-O2", *ISA[isa], *kernels._OPENMP],
               extra_ldflags=kernels._OPENMP, verbose=False)
    for kind in TYPES:
        blocks, w = random_blocks(kind, 45, 64, seed=3)
        x = torch.randn(9, 64)
        torch.testing.assert_close(mod.quant_linear(x, blocks, GGML_TYPES[kind]), x @ w.T, rtol=1e-5, atol=1e-4)
        _check_invariance(mod.quant_linear, blocks, kind, 64, threads=(2,))
        rows, t = mod.quant_repack(blocks, GGML_TYPES[kind], 64)  # the layout QuantLinear runs: the same bits
        assert torch.equal(mod.quant_linear(x, rows, t), mod.quant_linear(x, blocks, GGML_TYPES[kind]))
    for kind in ("Q5_0", "Q5_1", "Q6_K"):  # the layouts Q5_0S, Q5_1S, Q8S
        lin, w = repacked(kind, 45, 256, seed=3)
        x = torch.randn(9, 256)
        torch.testing.assert_close(mod.quant_linear(x, lin.rows, lin.kernel_type), x @ w.T, rtol=1e-5, atol=1e-4)
        _check_invariance(mod.quant_linear, lin.rows, kind, 256, threads=(2,), t=lin.kernel_type)


@needs_kernel
@pytest.mark.parametrize("kind", ["Q4_0", "Q4_1"])
def test_kernel_layout_gives_the_stored_blocks_bits(kind):
    """QuantLinear runs 4-bit blocks with their fp16 scales widened to fp32 (`quant_repack`): the same weights, so
    the same bits as the blocks as the file stores them, for a plain step's row and for a verify's 96."""
    blocks, w = random_blocks(kind, 83, 160)
    lib = kernels._library()
    rows, t = lib.quant_repack(blocks, GGML_TYPES[kind], 160)
    assert t == GGML_TYPES[kind] + 100 and rows.shape == (83, 5 * kernels.BLOCK_BYTES[t])
    assert torch.equal(lib.quant_dequantize(rows, t, 160), w)
    for m in (1, 3, 4, 5, MAX_ROWS):
        x = torch.randn(m, 160)
        assert torch.equal(lib.quant_linear(x, rows, t), lib.quant_linear(x, blocks, GGML_TYPES[kind]))


@needs_kernel
def test_fused_linears_equal_their_parts_bit_for_bit():
    parts = []
    for i, n in enumerate((64, 32, 32)):
        blocks, w = random_blocks("Q4_1", n, 64, seed=i)
        parts.append(QuantLinear(blocks, GGML_TYPES["Q4_1"], 64, torch.randn(n) if i else None, w))
    fused = fuse_linears(parts)
    assert type(fused) is QuantLinear and fused.out_features == 128
    x = torch.randn(5, 64)
    with torch.inference_mode():
        assert torch.equal(fused(x), torch.cat([p(x) for p in parts], -1))
    mixed = fuse_linears([parts[0], QuantLinear(*random_blocks("F16", 16, 64)[:1], GGML_TYPES["F16"], 64)])
    assert mixed.out_features == 80  # block types with no common layout: one call per part, same result
    with torch.inference_mode():
        assert torch.equal(mixed(x)[:, :64], parts[0](x))


def quantize_target(target, kind: str = "Q4_1", head: str = "Q8_0"):
    """Give every linear of a tiny target GGUF-typed weights (the fp32 Parameters become their dequantized values)
    and run it on the blocks, as a GGUF target loads with --weights native."""
    for parent in list(target.model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                t = head if name == "lm_head" else kind
                blocks, w = _quantize(child.weight, t)
                with torch.no_grad():
                    child.weight.copy_(w)
                setattr(parent, name, QuantLinear(blocks, GGML_TYPES[t], child.in_features, child.bias, child.weight))
    target.packed, target.weights = True, "native"
    return target


def _quantize(weight: torch.Tensor, kind: str):
    q = quants.quantize(weight.detach().numpy().astype(np.float32), GGMLQuantizationType[kind])
    blocks = np.ascontiguousarray(q).view(np.uint8).reshape(weight.shape[0], -1)
    w = quants.dequantize(blocks, GGMLQuantizationType[kind]).reshape(weight.shape).astype(np.float32)
    return torch.from_numpy(blocks.copy()), torch.from_numpy(w.copy())


@needs_kernel
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("kind", ["Q4_1", "Q4_0", "Q8_0"])
def test_native_tree_decoding_equals_plain_greedy(seed, kind):
    """Greedy ar / ddtree / caddtree on GGUF-typed weights: token-identical to plain decoding on the same blocks and
    to the cache-free reference of the fp32 model holding the same values."""
    target = quantize_target(make_tiny_target(seed), kind)
    fp32 = make_tiny_target(seed)
    fp32.model.load_state_dict({k: v for k, v in target.model.state_dict().items() if "blocks" not in k},
                               strict=False)
    p = torch.randint(2, 64, (12,), generator=torch.Generator().manual_seed(seed))
    plain = Decoder(target).generate(p, 32).tokens
    assert plain == reference_greedy(fp32, p, 32)
    for d in (OracleDrafter(target, num_positions=5, seed=seed), RandomDrafter(64, num_positions=4, seed=seed)):
        for budget in (4, 16):
            assert Decoder(target, d, method="ddtree", budget=budget).generate(p, 32).tokens == plain


@needs_kernel
def test_gguf_tensors_of_every_read_type_come_back_as_their_stored_blocks(tmp_path):
    """gguf-py reads F16 tensors as float16 arrays, block types (Q4_1, Q8_0, BF16) as bytes: `block_rows` gives the
    kernel the stored bytes of either, rows reordered as asked, and they dequantize to gguf-py's values."""
    writer = GGUFWriter(str(tmp_path / "t.gguf"), "llama")
    want = {}
    for kind in TYPES:
        blocks, w = random_blocks(kind, 6, 64, seed=len(want))
        data = blocks.numpy() if kind != "F16" else blocks.numpy().view(np.float16)  # as a converter writes them
        writer.add_tensor(kind, data, raw_dtype=GGMLQuantizationType[kind])
        want[kind] = w
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    order = np.array([5, 0, 1, 2, 3, 4])
    for t in GGUFReader(str(tmp_path / "t.gguf")).tensors:
        got = QuantLinear(block_rows(t, order), GGML_TYPES[t.name], 64).dequantized()
        assert torch.equal(got, want[t.name][order]), t.name


TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=512)
GGUF_FAMILIES = {  # family -> (gguf arch, HF config, loading keywords)
    "gemma2": (gguf.MODEL_ARCH.GEMMA2, lambda: Gemma2Config(**TINY, vocab_size=256, num_key_value_heads=2, head_dim=16,
                                                            query_pre_attn_scalar=16, sliding_window=8),
               {"attn_implementation": "eager"}),
    "gemma3": (gguf.MODEL_ARCH.GEMMA3, lambda: Gemma3TextConfig(**TINY, vocab_size=256, num_key_value_heads=2,
                                                                head_dim=16, query_pre_attn_scalar=256,
                                                                sliding_window=8), {}),
    # the vocabulary of Phi-3 (transformers' GGUF config keeps Phi3's default pad id, 32000)
    "phi3": (gguf.MODEL_ARCH.PHI3, lambda: Phi3Config(**TINY, vocab_size=32064, num_key_value_heads=4,
                                                      pad_token_id=0), {}),
}


# a Llama whose linears are stored in every type the kernel reads after a repack (K % 256 == 0 for the K types), q/k/v
# and gate/up in different types as llama.cpp's mixes store them: GGUF tensor name part -> type
K_LLAMA = (gguf.MODEL_ARCH.LLAMA, lambda: LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                                                      max_position_embeddings=512, tie_word_embeddings=False), {})
K_TYPES = {"attn_q": "Q4_K", "attn_k": "Q5_0", "attn_v": "Q8_0", "attn_output": "Q6_K", "ffn_gate": "Q5_K",
           "ffn_up": "Q4_0", "ffn_down": "Q5_1", "token_embd": "Q8_0", "output": "Q6_K"}


def write_tiny_gguf(folder, family: str, seed: int = 0):
    """A random tiny model of `family` written with gguf-py the way llama.cpp's converter lays one out (its tensor
    names, Q4_0 linears, a Q8_0 embedding / head, F32 norms, Gemma's stored as 1 + w; 'llama': K_TYPES, the K types
    as random blocks) -> the file's path."""
    arch, config, _ = K_LLAMA if family == "llama" else GGUF_FAMILIES[family]
    torch.manual_seed(seed)
    cfg = config()
    model = AutoModelForCausalLM.from_config(cfg)
    path = folder / f"tiny-{family}.gguf"
    w = gguf.GGUFWriter(str(path), gguf.MODEL_ARCH_NAMES[arch])
    d = cfg.hidden_size // cfg.num_attention_heads if family == "phi3" else cfg.head_dim
    for add, value in [(w.add_context_length, cfg.max_position_embeddings), (w.add_block_count, cfg.num_hidden_layers),
                       (w.add_feed_forward_length, cfg.intermediate_size), (w.add_embedding_length, cfg.hidden_size),
                       (w.add_key_length, d), (w.add_value_length, d), (w.add_rope_dimension_count, d),
                       (w.add_head_count, cfg.num_attention_heads), (w.add_head_count_kv, cfg.num_key_value_heads),
                       (w.add_layer_norm_rms_eps, cfg.rms_norm_eps), (w.add_rope_freq_base, 1e4),
                       (w.add_vocab_size, cfg.vocab_size)]:
        add(value)
    if family not in ("phi3", "llama"):
        w.add_sliding_window(cfg.sliding_window)
    names = gguf.get_tensor_name_map(arch, cfg.num_hidden_layers)
    for hf, t in model.state_dict().items():
        a = t.detach().float().numpy()
        name = names.get_name(hf, try_suffixes=(".weight", ".bias"))
        if name is None:  # Gemma's tied head: the embedding is the head
            assert hf == "lm_head.weight" and family != "phi3"
        elif a.ndim == 1:
            w.add_tensor(name, a + 1 if family not in ("phi3", "llama") else a)
        elif family == "llama":
            kind = K_TYPES[name.split(".")[-2] if name.count(".") > 1 else name.split(".")[0]]
            blocks = raw_blocks(kind, *a.shape, seed=len(hf)) if kind.endswith("K") else \
                quants.quantize(a, GGMLQuantizationType[kind])
            w.add_tensor(name, blocks, raw_dtype=GGMLQuantizationType[kind])
        else:
            kind = GGMLQuantizationType.Q8_0 if "embed" in hf or "lm_head" in hf else GGMLQuantizationType.Q4_0
            w.add_tensor(name, quants.quantize(a, kind), raw_dtype=kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@needs_kernel
@pytest.mark.parametrize("family", sorted(GGUF_FAMILIES))
def test_gguf_files_of_gemma_and_phi3_decode_on_their_own_blocks(tmp_path, family):
    """A GGUF of Gemma2, Gemma3 or Phi3 (fused q/k/v and gate/up as stored): transformers loads it, every linear goes
    onto the file's blocks (each checked at load against the fp32 weights transformers built, bit for bit), the lean
    forward runs them with exactness 'guaranteed', and greedy ar / ddtree / caddtree on the blocks give the tokens of
    plain decoding of the fp32 model loaded from the same file."""
    path = write_tiny_gguf(tmp_path, family)
    keywords = GGUF_FAMILIES[family][2]
    load = lambda: AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=path.name, dtype=torch.float32,  # noqa
                                                        **keywords).eval()
    model, fp32 = load(), load()
    counts = use_gguf_blocks(model, path)
    assert counts == {"Q4_0": 4 * 2 if family == "phi3" else 7 * 2, "Q8_0": 1}, counts
    assert not any(type(m) is nn.Linear for m in model.modules())
    target = Target(model=model, tokenizer=None, name=family, fingerprint=family, packed=True, weights="native",
                    lean=LeanForward(model))
    assert target.exactness == "guaranteed" and target.lean.native is not None
    reference = Target(model=fp32, tokenizer=None, name="fp32", fingerprint="fp32")
    V = model.config.vocab_size
    cost = fit_cost_model(TOY_COSTS, {"target_fingerprint": family})
    for seed in (0, 1):
        p = torch.randint(2, V, (12,), generator=torch.Generator().manual_seed(seed))
        plain = Decoder(target).generate(p, 24).tokens
        assert plain == reference_greedy(reference, p, 24)
        for dec in (Decoder(target, OracleDrafter(target, 5, seed=seed), method="ddtree", budget=8),
                    Decoder(target, RandomDrafter(V, 4, seed=seed), method="ddtree", budget=12),
                    Decoder(target, OracleDrafter(target, 5, seed=seed), method="caddtree", cost_model=cost)):
            assert dec.generate(p, 24).tokens == plain, dec.method


@needs_kernel
def test_a_gguf_of_k_and_5_bit_types_decodes_on_its_blocks(tmp_path):
    """A Llama GGUF in Q4_K, Q5_K, Q6_K, Q5_0, Q5_1 (with Q4_0 and Q8_0 beside them in the fused q/k/v and gate/up, as
    llama.cpp's mixes store them): every linear goes onto the file's blocks, repacked and checked at load against the
    fp32 weights transformers built, the C++ layer loop runs them, and greedy ar / ddtree / caddtree give the tokens of
    plain decoding of the fp32 model loaded from the same file."""
    path = write_tiny_gguf(tmp_path, "llama")
    load = lambda: AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=path.name,  # noqa: E731
                                                        dtype=torch.float32).eval()
    model, fp32 = load(), load()
    counts = use_gguf_blocks(model, path)
    assert counts == {"Q4_K": 2, "Q5_0": 2, "Q8_0": 2, "Q6_K": 3, "Q5_K": 2, "Q4_0": 2, "Q5_1": 2}, counts
    target = Target(model=model, tokenizer=None, name="llama", fingerprint="llama", packed=True, weights="native",
                    lean=LeanForward(model))
    assert target.exactness == "guaranteed" and target.lean.native is not None
    reference = Target(model=fp32, tokenizer=None, name="fp32", fingerprint="fp32")
    cost = fit_cost_model(TOY_COSTS, {"target_fingerprint": "llama"})
    for seed in (0, 1):
        p = torch.randint(2, 256, (12,), generator=torch.Generator().manual_seed(seed))
        plain = Decoder(target).generate(p, 24).tokens
        assert plain == reference_greedy(reference, p, 24) and len(set(plain)) > 3  # a model, not NaN's argmax
        for dec in (Decoder(target, OracleDrafter(target, 5, seed=seed), method="ddtree", budget=8),
                    Decoder(target, RandomDrafter(256, 4, seed=seed), method="caddtree", cost_model=cost)):
            assert dec.generate(p, 24).tokens == plain, dec.method
