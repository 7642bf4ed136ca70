"""DFlash drafter: block masking, incremental cache, save/load, target checks, a few training steps (tiny target)."""
import types

import pytest
import torch

from caddtree.dflash import (OPTIONAL_FIELDS, DFlashConfig, DFlashDrafter, DFlashModel, default_target_layers,
                             load_drafter, save_drafter)
from caddtree.errors import CaddtreeError
from caddtree.target import Target


def tiny_target(vocab=96, hidden=32, layers=4, fingerprint="tiny", seed=0, family="llama"):
    """family "llama", or "qwen2" / "qwen3" (the drafter's layers then carry q/k/v biases / per-head q/k norms)."""
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config, Qwen3Config
    torch.manual_seed(seed)
    kind = {"llama": LlamaConfig, "qwen2": Qwen2Config, "qwen3": Qwen3Config}[family]
    cfg = kind(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=4,
               num_key_value_heads=2, head_dim=hidden // 4, intermediate_size=64, max_position_embeddings=256,
               initializer_range=0.3)  # a large init makes the frozen tied LM head expressive
    return Target(AutoModelForCausalLM.from_config(cfg).eval(), tokenizer=None, name="tiny", fingerprint=fingerprint)


def tiny_drafter(tg, block=4, layers=2, seed=1, K=0):
    torch.manual_seed(seed)
    c = DFlashConfig.for_target(tg, num_layers=layers, block_size=block, draft_vocab_size=K)
    m = DFlashModel(c).bind(tg)
    if K:
        m.set_vocab(torch.randperm(tg.vocab_size)[:K].sort().values, tg)
    m.init_from_target(tg)
    for p in m.parameters():  # make every weight non-trivial so that a leak would show
        p.data.add_(0.05 * torch.randn_like(p))
    return m


def seq_features(tg, layers, T=24, seed=2):
    g = torch.Generator().manual_seed(seed)
    toks = torch.randint(0, tg.vocab_size, (T,), generator=g)
    tg.hidden_layers = layers
    _, feats = tg.forward(toks, tg.new_cache())
    return toks, feats


def test_target_layer_ids():
    assert default_target_layers(30, 3) == [1, 14, 27]
    assert default_target_layers(36, 5) == [1, 9, 17, 25, 33]


def test_block_masking():
    """A block's output depends only on context before its anchor and on its own root: perturbing a later context
    position or another block's root changes nothing; perturbing an earlier position does change it."""
    tg = tiny_target()
    m = tiny_drafter(tg)
    toks, feats = seq_features(tg, m.c.target_layers)
    anchors = torch.tensor([5, 9, 14, 20])
    with torch.no_grad():
        base = m.train_forward(toks, feats, anchors)
        assert base.shape == (4, m.c.block_size - 1, tg.vocab_size)
        f2 = feats.clone()
        f2[9:] += 3.0  # positions >= 9: invisible to blocks anchored at 5 and 9
        out = m.train_forward(toks, f2, anchors)
        assert torch.allclose(out[:2], base[:2], atol=1e-5)
        assert not torch.allclose(out[2:], base[2:], atol=1e-3)
        t2 = toks.clone()
        t2[14] = (t2[14] + 1) % tg.vocab_size  # another block's root: isolated
        out = m.train_forward(t2, feats, anchors)
        assert torch.allclose(out[[0, 1, 3]], base[[0, 1, 3]], atol=1e-5)
        assert not torch.allclose(out[2], base[2], atol=1e-3)
        # many blocks in one pass == each block alone
        for i, a in enumerate(anchors.tolist()):
            assert torch.allclose(m.train_forward(toks, feats, torch.tensor([a]))[0], base[i], atol=1e-4)


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3"])
@pytest.mark.parametrize("K", [0, 40])
def test_incremental_cache_matches_recompute_and_training_path(K, family):
    tg = tiny_target(family=family)
    m = tiny_drafter(tg, K=K)
    toks, feats = seq_features(tg, m.c.target_layers, T=30)
    d = DFlashDrafter(m, calibrate=False)
    d.reset(toks[:6])
    prev = 0
    for ell in (6, 9, 10, 17, 25):  # rounds accepting 3, 1, 7, 8 tokens
        lp = d.propose(toks[:ell + 1], feats[prev:ell])
        prev = ell
        fresh = DFlashDrafter(m, calibrate=False)
        fresh.reset(toks[:ell])
        ref = fresh.propose(toks[:ell + 1], feats[:ell])
        assert lp.shape == (m.c.block_size - 1, tg.vocab_size)
        assert torch.allclose(lp.exp().sum(-1), torch.ones(lp.shape[0]), atol=1e-4)
        assert torch.allclose(lp, ref, atol=1e-4)
        with torch.no_grad():
            tr = m.full_log_probs(m.train_forward(toks, feats, torch.tensor([ell]))[0])
        assert torch.allclose(lp, tr, atol=1e-4)
    with pytest.raises(CaddtreeError):
        d.propose(toks[:27], feats[25:27])  # fed the features of position 25 twice


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3"])
@pytest.mark.parametrize("K", [0, 40])
def test_save_load_roundtrip(tmp_path, K, family):
    tg = tiny_target(family=family)
    m = tiny_drafter(tg, K=K)
    save_drafter(m, tmp_path / "d")
    from safetensors.torch import load_file
    saved = load_file(str(tmp_path / "d" / "model.safetensors"))
    assert set(saved) == set(m.state_dict())  # the drafter's own weights only
    assert all(tuple(v.shape) != (tg.vocab_size, 32) for v in saved.values())  # no embedding / LM head
    d2 = load_drafter(tmp_path / "d", tg)
    toks, feats = seq_features(tg, m.c.target_layers)
    assert all(torch.equal(v, d2.model.state_dict()[k]) for k, v in m.state_dict().items())
    a = DFlashDrafter(m, calibrate=False).propose(toks[:11], feats[:10])
    b = d2.propose(toks[:11], feats[:10])
    # equal weights, but PyTorch's linear with a bias (Qwen2's) can round differently for another copy of them
    torch.testing.assert_close(a, b, rtol=0, atol=0 if family == "llama" else 1e-6)
    assert d2.target_layers == m.c.target_layers and d2.num_positions == m.c.block_size - 1


@pytest.mark.parametrize("kw,word", [({"hidden": 48}, "hidden size"), ({"vocab": 80}, "vocabulary"),
                                     ({"layers": 5}, "layer count"), ({"fingerprint": "other"}, "fingerprint")])
def test_mismatched_target(tmp_path, kw, word):
    save_drafter(tiny_drafter(tiny_target()), tmp_path / "d")
    with pytest.raises(CaddtreeError) as e:
        load_drafter(tmp_path / "d", tiny_target(**kw))
    msg = str(e.value)
    assert word in msg and "\n" not in msg and "train-drafter" in msg and "--drafter lookup" in msg


def test_a_drafter_fits_other_files_of_its_model_only(tmp_path, capsys):
    """A drafter trained beside one file of a model (its config's `target_model`) loads on another file of it (another
    fingerprint, e.g. another quantisation, the same `Target.model_id`) with one notice line; a target of another
    model, or one whose model is unknown, is still refused by the fingerprint."""
    tg = tiny_target()
    tg.model_id = "llama:org/tiny"
    save_drafter(tiny_drafter(tg), tmp_path / "d")
    requantised = tiny_target(fingerprint="tiny-q4_k_m")
    requantised.model_id = tg.model_id
    load_drafter(tmp_path / "d", requantised)
    err = capsys.readouterr().err
    assert "another file of llama:org/tiny (tiny)" in err and err.count("\n") == 1
    for model_id in ("llama:org/other", ""):
        other = tiny_target(fingerprint="tiny-q4_k_m")
        other.model_id = model_id
        with pytest.raises(CaddtreeError, match="fingerprint tiny != tiny-q4_k_m"):
            load_drafter(tmp_path / "d", other)


def test_broken_drafter_directory_is_a_one_line_error(tmp_path):
    tg = tiny_target()
    save_drafter(tiny_drafter(tg), tmp_path / "d")
    weights = (tmp_path / "d/model.safetensors").read_bytes()
    (tmp_path / "d/model.safetensors").write_bytes(weights[:1000])  # an interrupted copy
    with pytest.raises(CaddtreeError, match="model.safetensors does not load into the drafter") as e:
        load_drafter(tmp_path / "d", tg)
    assert "\n" not in str(e.value)
    (tmp_path / "d/model.safetensors").write_bytes(weights)
    cfg = (tmp_path / "d/config.json").read_text()
    (tmp_path / "d/config.json").write_text(cfg[:20])
    with pytest.raises(CaddtreeError, match="config.json cannot be read"):
        load_drafter(tmp_path / "d", tg)
    (tmp_path / "d/config.json").write_text(cfg.replace('"num_layers"', '"n_layers"'))
    with pytest.raises(CaddtreeError, match="does not match this caddtree's drafter config"):
        load_drafter(tmp_path / "d", tg)


def test_training_lowers_loss(tmp_path):
    """A few steps of the real training loop on a tiny target with a learnable pattern lower the loss."""
    from caddtree.train.config import TrainConfig
    from caddtree.train.loop import train_drafter
    torch.manual_seed(0)
    tg = tiny_target()
    layers = default_target_layers(tg.config.num_hidden_layers)
    tg.hidden_layers = layers
    recs = {"tokens": [], "prompt_len": [], "feats": [], "source": [], "start": 0, "count": 8}
    for i in range(8):  # responses are arithmetic progressions mod V: easy to draft from the root alone
        step = 1 + i % 3
        toks = torch.cat([torch.randint(0, 96, (6,)), (torch.arange(40) * step + i) % 96])
        _, f = tg.forward(toks, tg.new_cache())
        recs["tokens"].append(toks.int()); recs["prompt_len"].append(6)
        recs["feats"].append(f.to(torch.bfloat16)); recs["source"].append("toy")
    (tmp_path / "data").mkdir()
    torch.save(recs, tmp_path / "data" / "shard_00000.pt")
    args = TrainConfig(block_size=4, layers=1, num_target_layers=3, steps=30, lr=1e-2, warmup=3,
                       anchors=16, seqs_per_step=2, max_seq=64, gamma=None, ckpt_minutes=100.0,
                       max_minutes=5.0, export=None, seed=0, log_every=1)
    losses = []
    train_drafter(tg, tmp_path, args, log=lambda line: losses.append(line))
    import json
    rows = [json.loads(x) for x in losses if '"train"' in x]
    assert rows[-1]["step"] == 30
    first, last = rows[0]["loss"], sum(r["loss"] for r in rows[-5:]) / 5
    assert last < 0.85 * first, (first, last)
    assert (tmp_path / "ckpt.pt").is_file()
    # resume: a second call continues from the checkpoint instead of restarting
    args.steps = 32
    more = []
    train_drafter(tg, tmp_path, args, log=lambda line: more.append(line))
    assert [json.loads(x)["step"] for x in more if '"train"' in x][0] == 31
    # a new phase after adding data: warm restart of the schedule, once (rerunning the command resumes the phase)
    args.steps, args.restart_schedule = 34, 1
    again = []
    train_drafter(tg, tmp_path, args, log=lambda line: again.append(line))
    lrs = [json.loads(x)["lr"] for x in again if '"train"' in x]
    assert lrs[:2] == pytest.approx([args.lr / args.warmup, 2 * args.lr / args.warmup], rel=1e-4)
    args.steps = 35
    last_run = []
    model = train_drafter(tg, tmp_path, args, log=lambda line: last_run.append(line))
    assert [json.loads(x)["lr"] for x in last_run if '"train"' in x][0] > 0.8 * args.lr  # past warm-up: no restart
    # a later phase on new data in another work dir: --init-from continues the exported drafter (not a new one)
    from caddtree.dflash import save_drafter
    save_drafter(model, tmp_path / "export")
    # eval-drafter reads the checkpoint as well as the export: the same weights either way
    from caddtree.train.evaluate import _drafter_from
    by_ckpt, by_dir = _drafter_from(tmp_path / "ckpt.pt", tg), _drafter_from(tmp_path / "export", tg)
    for a, b in zip(by_ckpt.model.state_dict().values(), by_dir.model.state_dict().values()):
        assert torch.equal(a, b)
    fresh = tmp_path / "phase2"
    (fresh / "data").mkdir(parents=True)
    torch.save(recs, fresh / "data" / "shard_00000.pt")
    import dataclasses
    cont = dataclasses.replace(args, steps=2, restart_schedule=0, init_from=tmp_path / "export")
    logged = []
    train_drafter(tg, fresh, cont, log=lambda line: logged.append(json.loads(line)))
    assert logged[0]["event"] == "init_from"
    assert [r for r in logged if r["event"] == "train"][0]["loss"] < 0.85 * first
    # held-out split: only sequences from val_from on, every val_every-th
    from caddtree.train.data import _training_seqs
    train, val = _training_seqs(tmp_path, 64, val_from=4, val_every=4)
    assert len(train) == 7 and len(val) == 1 and torch.equal(val[0][0], recs["tokens"][7].long())


def test_evaluate_tau_against_oracle_and_wrong_drafters():
    from caddtree.train.evaluate import evaluate
    V, L = 50, 7
    toks = torch.arange(40) % V
    refs = [(toks, 8, torch.zeros(40, 4))]

    class Fake:
        num_positions = L
        model = types.SimpleNamespace(fc=types.SimpleNamespace(weight=torch.zeros(1)))

        def __init__(self, shift):
            self.shift = shift

        def reset(self, prompt_ids):
            pass

        def propose(self, tokens, features):  # position k guesses token ℓ+k (+ shift: wrong guesses)
            lp = torch.full((L, V), -30.0)
            for k in range(L):
                lp[k, (int(tokens[-1]) + 1 + k + self.shift) % V] = 0.0
            return torch.log_softmax(lp, -1)

    # 32 tokens to emit after the root at index 7: 4 rounds of 8 (7 drafted + bonus)
    assert evaluate(Fake(0), refs)["tau"] == pytest.approx(8.0)
    assert evaluate(Fake(0), refs, budget=3)["tau"] == pytest.approx(4.0)  # a 3-node chain
    r = evaluate(Fake(5), refs)
    assert r["tau"] == 1.0 and r["pos_accept"][0] == 0.0


@pytest.mark.parametrize("K", [0, 40])
def test_calibrated_marginals_equal_shrinking_the_full_distribution(K):
    """The calibrated drafter mixes each row with the uniform law on the K draft columns and one outside value; the
    result must equal mixing the whole expanded [L, V] distribution, and the calibration must record the top token
    as a target id."""
    import math
    tg = tiny_target()
    m = tiny_drafter(tg, K=K)
    logits = torch.randn(3, K or tg.vocab_size) * 3
    keep = torch.tensor([1.0, 0.6, 0.2])
    full = m.full_log_probs(logits)
    a = keep[:, None]
    ref = torch.logaddexp(full + a.log(), (1 - a).clamp(min=1e-12).log() - math.log(tg.vocab_size))
    out = m.full_log_probs(logits, keep=keep)
    assert torch.allclose(out, ref, atol=1e-5) and torch.allclose(out.exp().sum(-1), torch.ones(3), atol=1e-5)
    toks, feats = seq_features(tg, m.c.target_layers, T=12)
    d = DFlashDrafter(m)
    d.reset(toks[:8])
    lp = d.propose(toks[:9], feats[:8])
    _, top, _ = d.calibration._pending
    assert top == lp.argmax(-1).tolist()  # target ids, also with a reduced vocabulary


def test_grouped_attention_equals_per_head_attention():
    """Layer.forward runs the r query heads of a KV group as one matmul; it must equal plain per-head attention with
    each KV head repeated for its r query heads (the textbook GQA), context mask and in-block part included."""
    import torch.nn.functional as F

    from caddtree.dflash import rope
    tg = tiny_target()
    m = tiny_drafter(tg)
    c, layer = m.c, m.layers[0]
    h, g, d = c.num_heads, c.num_kv_heads, c.head_dim
    assert h > g > 1  # the case under test
    torch.manual_seed(3)
    A, B, C = 3, c.block_size, 11
    x, ctx = torch.randn(A, B, c.hidden_size), torch.randn(C, c.hidden_size)
    pos = torch.tensor([4, 7, 11])[:, None] + torch.arange(B)[None]  # [A, B]
    mask = torch.zeros(A, C).masked_fill_(torch.arange(C)[None] >= pos[:, :1], -1e9)  # context before each anchor
    k_ctx, v_ctx = layer.context_kv(ctx, torch.arange(C))
    with torch.no_grad():
        out = layer(x, pos, k_ctx, v_ctx, mask)
        xn = layer.input_layernorm(x)
        r = h // g
        q = rope(layer.q_proj(xn).view(A * B, h, d).transpose(0, 1), pos.reshape(-1), c.rope_theta).view(h, A, B, d)
        kb = rope(layer.k_proj(xn).view(A * B, g, d).transpose(0, 1), pos.reshape(-1), c.rope_theta).view(g, A, B, d)
        vb = layer.v_proj(xn).view(A * B, g, d).transpose(0, 1).view(g, A, B, d)
        ref = torch.empty(h, A, B, d)
        for i in range(h):
            for a in range(A):
                keys = torch.cat([k_ctx[i // r], kb[i // r, a]])  # [C + B, d]
                vals = torch.cat([v_ctx[i // r], vb[i // r, a]])
                s = q[i, a] @ keys.T * d ** -0.5 + torch.cat([mask[a], torch.zeros(B)])[None]
                ref[i, a] = torch.softmax(s, -1) @ vals
        y = x + layer.o_proj(ref.permute(1, 2, 0, 3).reshape(A, B, h * d))
        yn = layer.post_attention_layernorm(y)
        y = y + layer.down_proj(F.silu(layer.gate_proj(yn)) * layer.up_proj(yn))
    assert torch.allclose(out, y, atol=1e-5)


def test_rope_table_equals_direct_angles():
    """The cached cos/sin table gives exactly the rotation computed from the angles of the given positions, also
    past the table's first size (it grows)."""
    from caddtree.dflash import rope
    d, theta = 16, 1e4
    x = torch.randn(2, 5, d)
    for pos in (torch.tensor([0, 1, 2, 3, 4]), torch.tensor([4090, 4095, 4096, 9000, 17])):
        inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        ang = pos.float()[:, None] * inv[None]
        cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)
        want = x * cos + torch.cat([-x[..., d // 2:], x[..., :d // 2]], -1) * sin
        assert torch.equal(rope(x, pos, theta), want)
        # a target's own (scaled) inverse frequencies and attention scaling, as `target_rope` passes them
        inv = inv * torch.linspace(1.0, 0.125, d // 2)
        ang = pos.float()[:, None] * inv[None]
        cos, sin = torch.cat([ang.cos(), ang.cos()], -1) * 1.25, torch.cat([ang.sin(), ang.sin()], -1) * 1.25
        want = x * cos + torch.cat([-x[..., d // 2:], x[..., :d // 2]], -1) * sin
        assert torch.equal(rope(x, pos, tuple(inv.tolist()), 1.25), want)


def test_context_cache_grows_in_place_and_equals_one_projection():
    """The drafter's context K/V grow in a buffer (appending k positions copies k rows, not the context): fed in
    rounds past the first capacity (256) as drafting does (`block`: a round's new rows and its block in one pass, the
    block's K/V in scratch rows after the context), it equals each layer's `context_kv` of every feature at once, and
    its block the training path's."""
    tg = tiny_target()
    m = tiny_drafter(tg)
    feats = torch.randn(300, m.fc.weight.shape[1])
    d = DFlashDrafter(m, calibrate=False)
    d.reset(None)
    ptrs = set()
    with torch.inference_mode():
        whole = [layer.context_kv(m.fuse(feats), torch.arange(300)) for layer in m.layers]  # per layer (k, v)
        for a, b in zip(range(0, 300, 7), list(range(7, 300, 7)) + [300]):
            d.block(a % 50, feats[a:b])
            ptrs.add(d.kv_buf[0][0].data_ptr())
        assert d.ctx_len == 300 and len(ptrs) == 2  # one regrowth past 256
        for (k, v), (kw, vw) in zip(d.kv, whole):
            torch.testing.assert_close(k, kw, rtol=0, atol=1e-6)
            torch.testing.assert_close(v, vw, rtol=0, atol=1e-6)
        pos = torch.arange(300, 300 + m.c.block_size)[None]
        torch.testing.assert_close(d.block(7), m.block_hidden(torch.tensor([7]), pos, whole)[0], rtol=0, atol=1e-5)


@pytest.mark.parametrize("K", [0, 40])
def test_skipped_rounds_keep_their_features_for_the_next_proposal(K):
    """A round that drafts nothing (`skip`) hands its features over; the next proposal is the one a drafter that saw
    them round by round makes, and a feature row given twice is still refused."""
    tg = tiny_target()
    m = tiny_drafter(tg, K=K)
    toks, feats = seq_features(tg, m.c.target_layers, T=30)
    every, skipping = DFlashDrafter(m, calibrate=False), DFlashDrafter(m, calibrate=False)
    every.reset(toks[:6]), skipping.reset(toks[:6])
    prev = 0
    for ell, skip in ((6, False), (9, True), (10, True), (17, False), (25, False)):
        a = every.propose(toks[:ell + 1], feats[prev:ell])
        if skip:
            skipping.skip(feats[prev:ell])
        else:
            assert torch.allclose(skipping.propose(toks[:ell + 1], feats[prev:ell]), a, atol=1e-5)
        prev = ell
    with pytest.raises(CaddtreeError):
        skipping.propose(toks[:27], feats[25:27])


def test_sampled_proposals_are_the_processed_law_and_calibrate_per_setting():
    """Under sampling the drafter proposes its logits processed as the target's are (`accept.draft_log_probs`);
    greedily nothing changes; each setting has its own calibration."""
    from caddtree.accept import SamplingParams, draft_log_probs
    tg = tiny_target()
    m = tiny_drafter(tg)
    toks, feats = seq_features(tg, m.c.target_layers, T=12)
    d = DFlashDrafter(m, calibrate=False)
    greedy = d.propose(toks[:11], feats[:10])
    hot = SamplingParams(temperature=0.5, top_p=0.8)
    d.set_sampling(hot), d.reset(None)
    sampled = d.propose(toks[:11], feats[:10])
    assert torch.allclose(sampled, draft_log_probs(greedy, hot), atol=1e-5)
    assert not torch.allclose(sampled, greedy, atol=1e-3)
    c = DFlashDrafter(m, calibrate=True)
    c.set_sampling(hot)
    cal_hot = c.calibration
    c.set_sampling(SamplingParams())
    assert c.calibration is not cal_hot and c.calibration is c.calibration


def test_fbgemm_linears_are_close_and_training_stays_exact():
    """kernels.DynamicLinear: 'fp16' is the fp32 product with W rounded to fp16 (sums in fp32), 'int8' within a few %
    (8-bit weights per row and activations per call); in grad mode both run the fp32 weight exactly (training)."""
    from caddtree.kernels import DynamicLinear, dynamic_available
    if not dynamic_available():
        pytest.skip("no fbgemm here (not an x86 CPU build of PyTorch)")
    torch.manual_seed(0)
    x, w, b = torch.randn(8, 64), torch.randn(48, 64), torch.randn(48)
    with torch.inference_mode():
        f16, i8 = DynamicLinear(w, b, "fp16")(x), DynamicLinear(w, b, "int8")(x)
    ref16 = torch.nn.functional.linear(x, w.half().float(), b)
    assert torch.allclose(f16, ref16, rtol=1e-5, atol=1e-4)
    ref = torch.nn.functional.linear(x, w, b)
    assert not torch.equal(f16, ref)  # really the fp16 weights
    assert (i8 - ref).abs().max() < 0.03 * ref.abs().max()
    assert torch.equal(DynamicLinear(w, b, "int8")(x), ref)  # grad mode: the fp32 W


def test_fast_drafter_proposes_close_to_fp32_and_has_its_own_profile_key():
    """A native target's drafter (`quantize=True`) without the one-call pass (`dflash.draft_pass`: head_dim 8 here)
    runs its layers on fbgemm fp16 and its head on int8: not exact, a
    drafter need not be, but its proposals stay close to the fp32 drafter's, and its cost-profile key names the
    kernels (a profile priced with slower ones is not reused), while the other kinds keep the config's id."""
    import hashlib
    import json
    from dataclasses import asdict, replace

    from caddtree.drafter import drafter_id
    from caddtree.kernels import DynamicLinear, dynamic_available
    tg = tiny_target()
    exact = DFlashDrafter(tiny_drafter(tg), calibrate=False)
    fast = DFlashDrafter(tiny_drafter(tg), calibrate=False, quantize=True)
    # the key profiles were saved under before the layout and RoPE fields existed (unset for a Llama-shaped drafter)
    # and before `target_model` (never in the key: the fingerprint pins the target)
    before = {k: v for k, v in asdict(exact.c).items() if k not in OPTIONAL_FIELDS and k != "target_model"}
    digest = hashlib.sha256(json.dumps(before, sort_keys=True, default=str).encode()).hexdigest()[:12]
    assert drafter_id(exact) == f"DFlashDrafter-{digest}"
    assert drafter_id(DFlashDrafter(DFlashModel(replace(exact.c, qk_norm=True)).bind(tg))) != drafter_id(exact)
    if not dynamic_available():
        assert fast.linears in ("q8_0", "fp32") and drafter_id(fast) == drafter_id(exact)
        return
    assert fast.fast is None  # head_dim 8: the one-call pass (`draft_pass`) needs 16, so PyTorch's modules run
    assert fast.linears == "fbgemm-f16-i8head"
    assert drafter_id(fast) == f"DFlashDrafter-{digest}-fbgemm-f16-i8head-p3"  # the draft pass's version too
    assert type(fast.head) is DynamicLinear and fast.head.kind == "int8"
    layer = fast.model.layers[0]
    assert all(type(p) is DynamicLinear and p.kind == "fp16" for p in (layer.q_proj, layer.down_proj, fast.model.fc))
    toks, feats = seq_features(tg, exact.target_layers, T=20)
    for d in (exact, fast):
        d.reset(toks[:12])
    a, b = exact.propose(toks[:13], feats[:12]), fast.propose(toks[:13], feats[:12])  # [B-1, V] log-probs
    assert not torch.equal(a, b)
    assert (a.exp() - b.exp()).abs().max() < 0.02  # probabilities within 2 points


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3"])
def test_draft_pass_in_one_call_is_the_python_pass_on_fp16_weights(family):
    """draft_layers.cpp (`dflash.draft_pass`: what a native target's drafter runs where the kernels are built) is
    `DFlashDrafter.block`'s Python pass with every linear's weights rounded to fp16: the same block hidden states and
    context K/V to fp32 rounding, round after round (new features, none, more than a row group, past the buffer's
    first capacity), with q/k/v biases (qwen2) and per-head q/k norms (qwen3)."""
    import copy

    from caddtree.drafter import drafter_id
    from caddtree.kernels import packing_available
    if not packing_available():
        pytest.skip("the CPU kernels are not built here")
    tg = tiny_target(hidden=64, family=family)  # head_dim 16, widths multiples of 32: what the kernels take
    m = tiny_drafter(tg)
    rounded = copy.deepcopy(m)
    for lin in rounded.modules():
        if isinstance(lin, torch.nn.Linear):
            lin.weight.data = lin.weight.data.half().float()
    fast, ref = DFlashDrafter(m, calibrate=False, quantize=True), DFlashDrafter(rounded, calibrate=False)
    assert fast.fast is not None and fast.linears.startswith("f16rows-")
    assert drafter_id(fast).endswith(f"-{fast.linears}-p3")
    feats = torch.randn(300, m.fc.weight.shape[1])
    for d in (fast, ref):
        d.reset(None)
    with torch.inference_mode():
        bounds = [0, 5, 5, 6, 19, 26, 40] + list(range(80, 301, 44)) + [300]  # 0, 1, 13 rows; 256 crossed
        for i, (a, b) in enumerate(zip(bounds, bounds[1:])):
            feats_ab = feats[a:b] if b > a else None
            x, y = fast.block(i % tg.vocab_size, feats_ab), ref.block(i % tg.vocab_size, feats_ab)
            torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-4)
            assert fast.ctx_len == ref.ctx_len == b
        for (k, v), (kr, vr) in zip(fast.kv, ref.kv):
            torch.testing.assert_close(k, kr, rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(v, vr, rtol=1e-4, atol=1e-4)
        twin = copy.deepcopy(fast)  # the profile times copies: the pass is shared, the context K/V are not
        assert twin.fast is fast.fast and twin.kv[0][0].data_ptr() != fast.kv[0][0].data_ptr()
        torch.testing.assert_close(twin.block(3), fast.block(3), rtol=0, atol=0)
        assert not torch.equal(fast.block(3), DFlashDrafter(m, calibrate=False).block(3))  # fp16 weights: not fp32's
