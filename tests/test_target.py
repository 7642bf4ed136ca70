"""Target forward internals: grouped-query attention without KV-head copies, and the in-place growing KV cache."""
import pytest
import torch
from transformers import DynamicCache

from caddtree.verify import commit_path, verify_tree
from caddtree.tree import build_tree
from conftest import make_tiny_target


def _tree(vocab: int, n: int, seed: int = 0):
    lp = torch.log_softmax(3 * torch.randn(5, vocab, generator=torch.Generator().manual_seed(seed)), -1)
    return build_tree(lp, n)


def test_grouped_attention_matches_transformers_sdpa():
    ours, ref = make_tiny_target(4), make_tiny_target(4)
    assert ours.model.config._attn_implementation == "caddtree_sdpa"
    ref.model.set_attn_implementation("sdpa")  # transformers' own path (repeats the KV heads)
    ids = torch.randint(2, 64, (20,), generator=torch.Generator().manual_seed(1))
    tree = _tree(ours.vocab_size, 9)
    out = []
    for t in (ours, ref):
        cache = t.new_cache()
        t.forward(ids[:-1], cache)
        tree_logits, _ = verify_tree(t, cache, int(ids[-1]), tree)   # explicit tree mask
        cache.crop(-(len(tree) + 1))
        step_logits, _ = t.forward(ids[:3], cache)                      # 3-token causal step on a cache
        out.append((tree_logits, step_logits))
    for a, b in zip(*out):
        assert torch.allclose(a, b, atol=1e-5)


def test_growing_cache_equals_dynamic_cache():
    t = make_tiny_target(5)
    ids = torch.randint(2, 64, (30,), generator=torch.Generator().manual_seed(2))
    grow, plain = t.new_cache(), DynamicCache(config=t.config)
    assert type(grow.layers[0]).__name__ == "GrowingLayer"
    for cache in (grow, plain):
        t.forward(ids[:10], cache)
        tree = _tree(t.vocab_size, 7)
        verify_tree(t, cache, int(ids[10]), tree)
        commit_path(cache, 10, [0, 1], t.device)          # compaction shortens the views
        t.forward(ids[11:14], cache)
        cache.crop(-2)
        t.forward(ids[14:20], cache)
    ptr = grow.layers[0].keys.data_ptr()
    for g, p in zip(grow.layers, plain.layers):
        assert torch.equal(g.keys, p.keys) and torch.equal(g.values, p.values)
    t.forward(ids[20:21], grow)
    assert grow.layers[0].keys.data_ptr() == ptr  # appended in place, no copy of the cache
    a, _ = t.forward(ids[21:25], grow)
    t.forward(ids[20:21], plain)
    b, _ = t.forward(ids[21:25], plain)
    assert torch.allclose(a, b, atol=1e-5)


def test_publish_once_builds_atomically_and_tolerates_a_concurrent_winner(tmp_path):
    from caddtree.files import publish_dir_once as _publish_once
    dest = tmp_path / "models" / "m"

    def build(tmp):
        assert not dest.exists()  # the build never writes into dest itself
        (tmp / "config.json").write_text("mine")

    _publish_once(dest, build)
    assert (dest / "config.json").read_text() == "mine"

    dest2 = tmp_path / "models" / "m2"

    def build_while_other_wins(tmp):
        dest2.mkdir()  # another process publishes first
        (dest2 / "config.json").write_text("theirs")
        (tmp / "config.json").write_text("mine")

    _publish_once(dest2, build_while_other_wins)
    assert (dest2 / "config.json").read_text() == "theirs"
    assert sorted(p.name for p in dest.parent.iterdir()) == ["m", "m2"]  # no temp dir left behind

    def build_fails(tmp):
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        _publish_once(tmp_path / "models" / "m3", build_fails)
    assert sorted(p.name for p in dest.parent.iterdir()) == ["m", "m2"]


def test_gguf_model_id_names_the_model_whatever_its_blocks(tmp_path):
    """Two quantisations of one checkpoint (llama.cpp's quantiser copies the `general.*` naming keys) share a model id
    and differ in fingerprint; `general.name` stands in where the file has no basename; a file naming nothing has
    none (a drafter then fits its own file only)."""
    import numpy as np
    from gguf import GGMLQuantizationType, GGUFWriter, quants

    from caddtree.target import _file_digest, gguf_model_id, open_gguf

    def write(name: str, kind: GGMLQuantizationType | None, naming: dict):
        path = tmp_path / name
        w = GGUFWriter(str(path), "llama")
        for key, value in naming.items():
            getattr(w, f"add_{key}")(value)
        a = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
        if kind is None:
            w.add_tensor("token_embd.weight", a)
        else:
            w.add_file_type(int(kind))
            w.add_tensor("token_embd.weight", quants.quantize(a, kind), raw_dtype=kind)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        return path

    keys = dict(organization="Org", basename="tiny", size_label="1M", finetune="Instruct")
    q8, q4 = (write(f"{k.name}.gguf", k, keys) for k in (GGMLQuantizationType.Q8_0, GGMLQuantizationType.Q4_0))
    assert gguf_model_id(open_gguf(q8)) == gguf_model_id(open_gguf(q4)) == "llama:Org/tiny/1M/Instruct"
    assert _file_digest(q8) != _file_digest(q4)
    assert gguf_model_id(open_gguf(write("named.gguf", None, dict(name="Tiny 1M")))) == "llama:Tiny 1M"
    assert gguf_model_id(open_gguf(write("bare.gguf", None, {}))) == ""
    assert open_gguf(tmp_path / "missing.gguf") is None and gguf_model_id(None) == ""
