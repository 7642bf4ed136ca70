"""Losslessness of every decoding path on tiny random targets, KV compaction, and the sampling distribution."""
import collections
import math

import pytest
import torch

from caddtree.accept import SamplingParams
from caddtree.drafter import LookupMixtureDrafter, PromptLookupDrafter
from caddtree.engine import Decoder, commit_path, verify_tree
from caddtree.errors import CaddtreeError
from caddtree.tree import build_tree
from conftest import OracleDrafter, RandomDrafter, make_tiny_target, reference_greedy


def prompt(seed: int, length: int = 12, vocab: int = 64) -> torch.Tensor:
    return torch.randint(2, vocab, (length,), generator=torch.Generator().manual_seed(seed))


def drafters(target, seed):
    return {"oracle": OracleDrafter(target, num_positions=5, seed=seed),
            "random": RandomDrafter(target.vocab_size, num_positions=4, seed=seed),
            "lookup": PromptLookupDrafter(target.vocab_size, num_positions=6),
            "mix": LookupMixtureDrafter(RandomDrafter(target.vocab_size, num_positions=4, seed=seed),
                                        PromptLookupDrafter(target.vocab_size, num_positions=4))}


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("budget", [1, 4, 16])
def test_tree_greedy_equals_plain_greedy(seed, budget):
    target = make_tiny_target(seed)
    p = prompt(seed)
    expect = reference_greedy(target, p, 32)
    assert Decoder(target).generate(p, 32).tokens == expect
    for name, d in drafters(target, seed).items():
        out = Decoder(target, d, method="ddtree", budget=budget).generate(p, 32)
        assert out.tokens == expect, name
        assert sum(r.emitted for r in out.rounds) == len(expect)
        assert all(r.tree_size <= budget for r in out.rounds)


def test_oracle_drafter_gets_deep_acceptance():
    target = make_tiny_target(1, eos=None)
    out = Decoder(target, OracleDrafter(target, 5, miss_rate=0.0), method="ddtree", budget=8).generate(prompt(1), 30)
    assert out.mean_accepted > 4.0  # a perfect drafter with 5 positions commits ~6 tokens a round


def test_max_new_tokens_and_eos_exact():
    target = make_tiny_target(2)
    p = prompt(2)
    full = reference_greedy(target, p, 30)
    for n in (1, 2, 7, 13):
        out = Decoder(target, OracleDrafter(target, 5, miss_rate=0.0), method="ddtree", budget=16).generate(p, n)
        assert out.tokens == full[:n]
    # make the 5th greedy token an EOS: generation must stop right after it, exactly as plain decoding would
    target.model.generation_config.eos_token_id = full[4]
    target.model.config.eos_token_id = full[4]
    expect = reference_greedy(target, p, 30)
    out = Decoder(target, OracleDrafter(target, 5, miss_rate=0.0), method="ddtree", budget=16).generate(p, 30)
    assert out.tokens == expect and out.tokens[-1] == full[4] and out.stop_reason == "eos"


def test_compaction_equals_fresh_prefill():
    target = make_tiny_target(3)
    target.hidden_layers = [0, 1]
    p = prompt(3, 10)
    cache = target.new_cache()
    target.forward(p[:-1], cache)
    lp = torch.log_softmax(3 * torch.randn(4, target.vocab_size, generator=torch.Generator().manual_seed(0)), -1)
    tree = build_tree(lp, 12)
    logits, feats = verify_tree(target, cache, int(p[-1]), tree)
    leaf = int(tree.depths.argmax())
    path = []
    node = leaf
    while node >= 0:
        path.insert(0, node)
        node = int(tree.parents[node])
    rows = commit_path(cache, len(p) - 1, path, target.device)
    seq = torch.cat([p, tree.tokens[path]])
    assert cache.get_seq_length() == len(seq)
    fresh = target.new_cache()
    ref_logits, ref_feats = target.forward(seq, fresh)
    assert torch.allclose(logits[rows], ref_logits[len(p) - 1:], atol=1e-4)
    assert torch.allclose(feats[rows], ref_feats[len(p) - 1:], atol=1e-4)
    probe = torch.tensor([5, 9])
    after, _ = target.forward(probe, cache)
    after_ref, _ = target.forward(probe, fresh)
    assert torch.allclose(after, after_ref, atol=1e-4)


def test_bad_inputs_are_clear():
    target = make_tiny_target(0, max_pos=32)
    d = Decoder(target)
    with pytest.raises(CaddtreeError, match="max_new_tokens"):
        d.generate(prompt(0), 0)
    with pytest.raises(CaddtreeError, match="context window"):
        d.generate(prompt(0, 40), 4)
    with pytest.raises(CaddtreeError, match="lower --max-new-tokens"):
        d.generate(prompt(0, 20), 20)
    with pytest.raises(CaddtreeError, match="budget"):
        Decoder(target, RandomDrafter(64), method="ddtree", budget=0)
    with pytest.raises(CaddtreeError, match="unknown method"):
        Decoder(target, method="beam")
    with pytest.raises(CaddtreeError, match="tree budget 32 does not fit the target's context window"):
        Decoder(target, RandomDrafter(64), method="ddtree", budget=32)
    from caddtree.costmodel import fit_cost_model
    meas = {"ns": [0, 1, 4], "ctxs": [8], "verify_ms": [[10.0, 11.0, 13.0]], "draft_ms": 2.0}
    with pytest.raises(CaddtreeError, match="profiled for target other-model, not"):
        Decoder(target, RandomDrafter(64), method="caddtree",
                cost_model=fit_cost_model(meas, {"target_fingerprint": "other-model"}))
    Decoder(target, RandomDrafter(64), method="caddtree",
            cost_model=fit_cost_model(meas, {"target_fingerprint": target.fingerprint}))
    # prompt ids: one sequence of integer ids inside the vocabulary; a list or a tokenizer's [1, P] batch is fine
    for ids, match in [(torch.zeros(2, 3, dtype=torch.long), "one sequence of token ids"),
                       (torch.tensor([1.0, 2.0]), "integer token ids"), (torch.tensor([1, 64]), "token id 64, outside"),
                       (torch.tensor([-1, 2]), "token id -1, outside"), ([], "empty")]:
        with pytest.raises(CaddtreeError, match=match):
            d.generate(ids, 2)
    ref = d.generate(prompt(0), 3).tokens
    assert d.generate(prompt(0).tolist(), 3).tokens == d.generate(prompt(0)[None], 3).tokens == ref


def first_tokens_histogram(decoder, p, params, k, samples, seed0):
    hist = collections.Counter()
    for s in range(samples):
        hist[tuple(decoder.generate(p, k, params, seed=seed0 + s).tokens)] += 1
    return hist


def test_sampling_distribution_matches_plain_sampling():
    """Tree sampling must reproduce the plain-sampling law of the first 3 tokens.

    Exact law from the model; both samplers are compared to it with a chi-square test on the outcomes of
    expected count >= 5 (pooled remainder), at significance 1e-3 each: a wrong acceptance rule (e.g. accepting
    the drafter's token without a target draw) shifts the law by far more than this tolerance detects.
    """
    target = make_tiny_target(5, vocab=6, layers=1, eos=None)
    params = SamplingParams(temperature=1.0, top_k=5, top_p=0.95)
    p = torch.tensor([2, 3, 4, 5, 2, 3])
    from caddtree.accept import target_probs
    law = {}
    with torch.no_grad():
        def walk(seq, prob, depth):
            if depth == 3:
                law[tuple(seq[len(p):])] = prob
                return
            q = target_probs(target.model(torch.tensor([seq])).logits[0, -1:], params)[0]
            for t in range(6):
                if q[t] > 0:
                    walk(seq + [t], prob * q[t].item(), depth + 1)
        walk(p.tolist(), 1.0, 0)
    N = 600
    tree = Decoder(target, OracleDrafter(target, 3, seed=1, miss_rate=0.5), method="ddtree", budget=6)
    for name, dec in (("plain", Decoder(target)), ("tree", tree)):
        hist = first_tokens_histogram(dec, p, params, 3, N, seed0=1000)
        big = [o for o, pr in law.items() if pr * N >= 5]
        obs = [hist[o] for o in big] + [N - sum(hist[o] for o in big)]
        exp = [law[o] * N for o in big] + [N * (1 - sum(law[o] for o in big))]
        chi2 = sum((o - e) ** 2 / e for o, e in zip(obs, exp) if e > 0)
        dof = len(obs) - 1
        # Wilson-Hilferty upper quantile of chi-square at 1e-3 (z = 3.09)
        crit = dof * (1 - 2 / (9 * dof) + 3.09 * math.sqrt(2 / (9 * dof))) ** 3
        assert chi2 < crit, f"{name}: chi2={chi2:.1f} > {crit:.1f} (dof {dof})"
        assert set(hist) <= set(law), f"{name} produced a token sequence of probability 0"


def test_sampling_test_detects_a_biased_sampler():
    """The chi-square check above must be able to fail: greedy output is far from the sampling law."""
    target = make_tiny_target(5, vocab=6, layers=1, eos=None)
    p = torch.tensor([2, 3, 4, 5, 2, 3])
    hist = first_tokens_histogram(Decoder(target), p, SamplingParams(), 3, 20, 0)
    assert len(hist) == 1  # greedy is deterministic: one outcome, which the law test would reject


def test_lookup_calibration_tracks_observed_acceptance():
    d = PromptLookupDrafter(vocab_size=10, num_positions=2, confidence=0.8, prior_strength=4.0)
    seq = [1, 2, 3, 1, 2]          # suffix [1, 2] matched earlier -> votes 3 at position 0
    lp = d.propose(torch.tensor(seq))
    assert lp[0].exp().sum().item() == pytest.approx(1.0, abs=1e-5)
    assert lp[0, 3].exp().item() == pytest.approx(0.8 + 0.2 / 10, abs=1e-5)
    for _ in range(12):            # the target keeps committing 9 instead of the vote 3: confidence must fall
        d.reset(None)
        d.propose(torch.tensor(seq))
        d.propose(torch.tensor(seq + [9]))
    two = d.calibrations[2]  # the suffix [1, 2] is a 2-token match
    assert two.trials[0] > 10 and two.hits[0] == 0
    d.reset(None)
    lp = d.propose(torch.tensor(seq))
    assert d.match == 2 and d.calibrated(0) < 0.3
    assert lp[0].exp().max().item() < 0.35


def test_lookup_calibrates_each_match_length_apart():
    """A 1-token match that keeps failing must not lower the confidence in a 3-token repeat (nor the reverse)."""
    d = PromptLookupDrafter(vocab_size=20, num_positions=2, confidence=0.8, prior_strength=4.0)
    one = [5, 6, 7, 8, 5]            # suffix [5] seen before -> votes 6; the target commits 9
    three = [1, 2, 3, 4, 1, 2, 3]    # suffix [1, 2, 3] seen before -> votes 4; the target commits 4
    for _ in range(12):
        d.reset(None)
        d.propose(torch.tensor(one))
        assert d.match == 1
        d.propose(torch.tensor(one + [9]))
        d.reset(None)
        d.propose(torch.tensor(three))
        assert d.match == 3
        d.propose(torch.tensor(three + [4]))
    assert d.calibrations[1].rate(0) < 0.3 < 0.9 < d.calibrations[3].rate(0)
    assert d.calibrations[2].trials == [0, 0]
    d.reset(None)
    assert d.propose(torch.tensor(one))[0, 6].exp().item() < 0.3
    d.reset(None)
    assert d.propose(torch.tensor(three))[0, 4].exp().item() > 0.9


def test_lookup_mixture_moves_the_calibrated_share_onto_the_votes():
    base = torch.log_softmax(torch.randn(3, 10, generator=torch.Generator().manual_seed(0)) * 2, -1)  # [L=3, V=10]

    class Fixed(RandomDrafter):
        def propose(self, tokens, features):
            return base

    look = PromptLookupDrafter(vocab_size=10, num_positions=3, confidence=0.8)
    mix = LookupMixtureDrafter(Fixed(10, num_positions=3), look)
    seq = [1, 2, 3, 1, 2]  # suffix [1, 2] seen before -> position 0 votes 3, position 1 votes 1, position 2 votes 2
    lp = mix.propose(torch.tensor(seq), None)
    assert torch.allclose(lp.exp().sum(-1), torch.ones(3), atol=1e-5)
    p = base.exp()
    assert lp[0, 3].exp().item() == pytest.approx(0.8 + 0.2 * p[0, 3].item(), abs=1e-5)
    assert lp[0, 5].exp().item() == pytest.approx(0.2 * p[0, 5].item(), abs=1e-6)  # not voted: scaled base
    assert lp[2, 2].exp().item() == pytest.approx(0.8 + 0.2 * p[2, 2].item(), abs=1e-5)
    mix.reset(None)
    lp = mix.propose(torch.tensor([4, 5, 6, 7]), None)  # no repeated n-gram: the base marginals untouched
    assert torch.allclose(lp, base, atol=1e-6)
    assert look.calibration._pending is not None  # the lookup part keeps calibrating inside the mixture
    with pytest.raises(ValueError, match="positions"):
        LookupMixtureDrafter(Fixed(10, num_positions=3), PromptLookupDrafter(10, num_positions=4))


def test_profiling_does_not_change_the_lookup_calibration():
    from caddtree.profile import profile_costs
    target = make_tiny_target(0)
    d = PromptLookupDrafter(target.vocab_size, num_positions=4)
    profile_costs(target, d, ns=[0, 1, 2], ctxs=[16], repeats=3, warmup=1, progress=False)
    assert all(c.trials == [0] * 4 and c.hits == [0] * 4 and c._pending is None for c in d.calibrations)


def test_online_calibration_counts_chains_and_shrinks_overconfident_rows():
    from caddtree.drafter import OnlineCalibration, calibration_keep, shrink_to_uniform
    c = OnlineCalibration(3, prior_strength=1.0)
    c.expect(4, [7, 8, 9], [0.9, 0.9, 0.9])
    c.observe([0, 1, 2, 3, 7, 5, 9])  # position 0 right, 1 wrong, 2 never reached (chain broken)
    assert (c.trials, c.hits, c.predicted) == ([1, 1, 0], [1, 0, 0], [0.9, 0.9, 0.0])
    c.observe([0, 1, 2, 3, 7, 5, 9, 9])  # nothing pending: no double counting
    assert c.trials == [1, 1, 0]
    assert c.ratio(0) == pytest.approx(2 / 1.9) and c.ratio(1) == pytest.approx(1 / 1.9) and c.ratio(2) == 1.0
    lp = torch.log_softmax(torch.randn(3, 20) * 3, -1)
    out = shrink_to_uniform(lp, calibration_keep(c, 3), 20)
    assert torch.allclose(out.exp().sum(-1), torch.ones(3), atol=1e-5)
    assert torch.equal(out.argmax(-1), lp.argmax(-1))
    assert torch.allclose(out[0], lp[0], atol=1e-6) and torch.allclose(out[2], lp[2], atol=1e-6)  # ratio >= 1: kept
    top = lp[1].exp().max()
    assert out[1].exp().max().item() == pytest.approx(top.item() / 1.9 + (1 - 1 / 1.9) / 20, rel=1e-4)


class FeatureLog(RandomDrafter):
    """Random marginals; remembers the feature rows it was given (a trained drafter must see each exactly once)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.target_layers, self.rows = [0], 0

    def reset(self, prompt_ids):
        self.rows = 0

    def propose(self, tokens, features):
        self.rows += 0 if features is None else features.shape[0]
        assert self.rows == tokens.shape[0] - 1, "features of every committed token but the root, exactly once"
        return super().propose(tokens, features)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("stage2_ms", [0.2, 50.0])
def test_gated_two_stage_caddtree_is_exact_and_skips_where_stage_two_does_not_pay(seed, stage2_ms):
    import numpy as np

    from caddtree.costmodel import CostModel
    target = make_tiny_target(seed)
    p = prompt(seed, 16)
    expect = reference_greedy(target, p, 80)
    cv = np.r_[10.0, 10.0 + 0.5 * np.arange(1, 17)]  # C_v(n) for n = 0..16
    cost = CostModel([1], cv[None], np.zeros(17), [stage2_ms], [0.0], cheap_draft=[0.1])
    mix = LookupMixtureDrafter(FeatureLog(target.vocab_size, num_positions=4, seed=seed),
                               PromptLookupDrafter(target.vocab_size, num_positions=4))
    dec = Decoder(target, mix, method="caddtree", cost_model=cost)
    assert dec.gate is not None and Decoder(target, mix, "caddtree", cost_model=cost, gate=False).gate is None
    ran = []
    for _ in range(2):
        out = dec.generate(p, 80)
        assert out.tokens == expect
        assert all(isinstance(r.second_stage, bool) for r in out.rounds[:-1])  # the last round may have no room
        ran.append([r.second_stage for r in out.rounds if r.second_stage is not None])
        assert ran[-1][0] and 0 < sum(dec.gate.seen) <= sum(ran[-1])  # each generation starts afresh
    if stage2_ms == 50.0:  # costs 5 plain steps: after its warm-up the gate skips, re-checking every 8th round
        assert all(0 < sum(r) < len(r) / 2 for r in ran), ran


def test_round_times_add_up_to_the_decode_time_and_leave_out_the_callers(monkeypatch):
    """On a fake clock that only the gate's learning (after the verify, once the output passes a round) and the
    caller's stream callback move: the rounds' parts count the first and not the second."""
    import numpy as np

    import caddtree.engine as eng
    from caddtree.costmodel import CostModel
    clock, observed = [0.0], []
    monkeypatch.setattr(eng, "_now", lambda device: clock[0])
    learn = eng.Decoder._observe_realised

    def slow_learn(self, *args, **kwargs):
        clock[0] += 1.0
        observed.append(1)
        return learn(self, *args, **kwargs)

    monkeypatch.setattr(eng.Decoder, "_observe_realised", slow_learn)
    target = make_tiny_target(0)
    cost = CostModel([1], np.r_[10.0, 10.0 + 0.5 * np.arange(1, 17)][None], np.zeros(17), [0.2], [0.0],
                     cheap_draft=[0.1])
    mix = LookupMixtureDrafter(RandomDrafter(target.vocab_size, 4), PromptLookupDrafter(target.vocab_size, 4))
    out = Decoder(target, mix, method="caddtree", cost_model=cost).generate(
        prompt(0, 16), 40, on_tokens=lambda new: clock.__setitem__(0, clock[0] + 100.0))
    assert observed and out.decode_ms == pytest.approx(1000.0 * len(observed))
    assert sum(r.compact_ms for r in out.rounds) == pytest.approx(1000.0 * len(observed))


@pytest.mark.parametrize("seed", range(2))
def test_realised_gate_skips_an_overconfident_stage_two_that_the_predicted_gate_keeps(seed):
    """Stage 2 = random marginals with top probabilities near 1: its predicted gain is large, its trees are almost
    never accepted. The gate learning from realised acceptance stops paying for it; learning from the raw predictions
    (no Φ calibration) not."""
    import numpy as np

    from caddtree.costmodel import CostModel
    target = make_tiny_target(seed)
    p = prompt(seed, 16)
    expect = reference_greedy(target, p, 60)
    cv = np.r_[10.0, 10.0 + 0.5 * np.arange(1, 17)]
    cost = CostModel([1], cv[None], np.zeros(17), [2.0], [0.0], cheap_draft=[0.1])
    rates = {}
    for mode in ("realised", "predicted"):
        mix = LookupMixtureDrafter(RandomDrafter(target.vocab_size, num_positions=4, seed=seed, sharpness=30.0),
                                   PromptLookupDrafter(target.vocab_size, num_positions=4))
        dec = Decoder(target, mix, method="caddtree", cost_model=cost, gate=mode)
        ran = []
        for _ in range(2):
            out = dec.generate(p, 60)
            assert out.tokens == expect
            ran += [r.second_stage for r in out.rounds if r.second_stage is not None]
        rates[mode] = sum(ran) / len(ran)
    assert rates["predicted"] > 0.9 and rates["realised"] < 0.5, rates


def test_unknown_gate_is_a_clear_error():
    import numpy as np

    from caddtree.costmodel import CostModel
    target = make_tiny_target(0)
    cost = CostModel([1], np.r_[10.0, 10.5][None], np.zeros(2), [2.0], [0.0], cheap_draft=[0.1])
    mix = LookupMixtureDrafter(RandomDrafter(target.vocab_size, 4), PromptLookupDrafter(target.vocab_size, 4))
    with pytest.raises(CaddtreeError, match="unknown gate 'oracle'"):
        Decoder(target, mix, method="caddtree", cost_model=cost, gate="oracle")


def test_two_stage_mixture_equals_one_call():
    target = make_tiny_target(0)
    toks = prompt(0, 20)
    feats = torch.randn(19, 8)
    one = LookupMixtureDrafter(FeatureLog(target.vocab_size, 4, seed=1), PromptLookupDrafter(target.vocab_size, 4))
    two = LookupMixtureDrafter(FeatureLog(target.vocab_size, 4, seed=1), PromptLookupDrafter(target.vocab_size, 4))
    one.reset(toks), two.reset(toks)
    a = one.propose(toks[:15], feats[:14])
    two.propose_cheap(toks[:12])
    two.skip_rest(feats[:11])       # stage 2 skipped: its features wait for the next call
    two.propose_cheap(toks[:15])
    b = two.propose_rest(toks[:15], feats[11:14])
    assert torch.allclose(a, b)
    cheap = two.propose_cheap(toks[:16])
    assert torch.allclose(cheap.dense(), PromptLookupDrafter(target.vocab_size, 4).propose(toks[:16]))


def test_lookup_sparse_marginals_are_the_votes_mixed_into_the_uniform_law():
    V = 64
    look = PromptLookupDrafter(V, 4)
    votes = look.votes(prompt(3, 40, V).tolist() + prompt(3, 40, V)[:6].tolist())  # a repeat: votes at each position
    assert all(votes)
    sparse = look.sparse_marginals(votes)
    uniform = torch.full((4, V), -math.log(V))
    assert torch.allclose(sparse.dense(), look.mix_into(votes, uniform), atol=1e-6)
    assert torch.allclose(sparse.dense().exp().sum(-1), torch.ones(4), atol=1e-5)
    assert all(row == sorted(row, reverse=True) for row in sparse.log_probs)


def test_profile_times_both_stages_of_a_two_stage_drafter():
    from caddtree.costmodel import fit_cost_model
    from caddtree.profile import profile_costs
    target = make_tiny_target(0)
    mix = LookupMixtureDrafter(FeatureLog(target.vocab_size, 4), PromptLookupDrafter(target.vocab_size, 4))
    meas = profile_costs(target, mix, ns=[0, 1, 2], ctxs=[16, 32], repeats=2, warmup=1, progress=False)
    assert len(meas["cheap_draft_ms"]) == 2 and all(v > 0 for v in meas["cheap_draft_ms"])
    assert fit_cost_model(meas).cheap_draft is not None
    one = profile_costs(target, PromptLookupDrafter(target.vocab_size, 4), ns=[0, 1], ctxs=[16], repeats=1,
                        warmup=0, progress=False)
    assert "cheap_draft_ms" not in one


def test_calibration_follows_a_change_of_text():
    from caddtree.drafter import OnlineCalibration
    c = OnlineCalibration(1, prior_strength=1.0, memory=0.9)
    for k in range(200):  # a long run where the top token was always right ...
        c.expect(k, [1], [0.5])
        c.observe([0] * k + [1])
    assert c.rate(0) > 0.95
    for k in range(30):   # ... then text where it is always wrong: the rate follows within a few dozen trials
        c.expect(k, [1], [0.5])
        c.observe([0] * (k + 1))
    assert c.rate(0) < 0.15  # (hits 10·0.9^30 + prior 0.8) / (10 + 1)
    never = OnlineCalibration(1, prior_strength=1.0, memory=1.0)  # no forgetting: plain counts
    for k in range(10):
        never.expect(k, [1], [0.5])
        never.observe([0] * k + [1 if k < 5 else 0])
    assert (never.trials, never.hits) == ([10], [5])


@pytest.mark.parametrize("seed", range(2))
def test_phi_calibration_brings_predicted_phi_to_the_realised_acceptance(seed):
    """An overconfident drafter (random marginals, top probability near 1): the raw Φ of CaDDTree's trees is far
    above what the target accepts; with the online calibration the predicted Φ of later rounds is close to it, the
    trees are smaller, and the output is unchanged."""
    import numpy as np

    from caddtree.costmodel import CostModel
    target = make_tiny_target(seed)
    p = prompt(seed, 16)
    expect = reference_greedy(target, p, 60)
    cv = np.r_[10.0, 10.0 + 0.5 * np.arange(1, 17)]
    cost = CostModel([1], cv[None], np.zeros(17), [2.0], [0.0])
    gap, size = {}, {}
    for cal in (False, True):
        dec = Decoder(target, RandomDrafter(target.vocab_size, num_positions=4, seed=seed, sharpness=30.0),
                      method="caddtree", cost_model=cost, calibrate_phi=cal)
        rounds = []
        for _ in range(3):
            out = dec.generate(p, 60)
            assert out.tokens == expect
            rounds += [r for r in out.rounds if r.predicted_phi is not None]  # the last round may have no room
        late = rounds[len(rounds) // 2:]
        gap[cal] = np.mean([r.predicted_phi for r in late]) - np.mean([r.accepted for r in late])
        size[cal] = np.mean([r.tree_size for r in late])
    assert gap[False] > 1.0 and abs(gap[True]) < 0.5 * gap[False], gap
    assert size[True] < size[False], size
