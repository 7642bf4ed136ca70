"""Drafters: prompt lookup (votes, per-length calibration, sparse marginals), the lookup mixture and its two stages,
the online calibration, and how profiling leaves a drafter's learned state alone."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from caddtree.accept import SamplingParams
from caddtree.drafter import LookupMixtureDrafter, PromptLookupDrafter
from conftest import FeatureLog, RandomDrafter, make_tiny_target, prompt


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


def test_lookup_calibrates_each_sampling_setting_apart():
    """How often a vote is the committed token depends on the law the target samples from: a repeat that greedy
    decoding always copies is copied half the time at T = 1. Each setting learns its own rates; every greedy setting
    is one (top-k / top-p do not change an argmax)."""
    d = PromptLookupDrafter(vocab_size=20, num_positions=2, confidence=0.8, prior_strength=4.0)
    three = [1, 2, 3, 4, 1, 2, 3]  # votes 4 after the 3-token match
    hot = SamplingParams(temperature=1.0, top_p=0.9)
    for i in range(16):
        for params, next_token in ((SamplingParams(), 4), (hot, 4 if i % 2 else 9)):
            d.set_sampling(params)
            d.reset(None)
            d.propose(torch.tensor(three))
            d.propose(torch.tensor(three + [next_token]))
    d.set_sampling(SamplingParams(top_k=5, top_p=0.5))  # greedy all the same
    greedy = d.calibrations[3].rate(0)
    d.set_sampling(hot)
    sampled = d.calibrations[3].rate(0)
    assert greedy > 0.9 and 0.4 < sampled < 0.7, (greedy, sampled)
    d.set_sampling(SamplingParams(temperature=0.7))  # a setting never seen starts from the prior
    assert d.calibrations[3].rate(0) == pytest.approx(0.8)


def test_mixture_passes_the_sampling_setting_to_both_drafters():
    mix = LookupMixtureDrafter(RandomDrafter(10, 2), PromptLookupDrafter(10, 2))
    hot = SamplingParams(temperature=0.7, top_p=0.95)
    mix.set_sampling(hot)
    assert mix.sampling == mix.base.sampling == mix.lookup.sampling == hot


def _scan_continuations(seq, n_max, n_min, L, max_matches):
    """The lookup as a scan of the whole context (what the n-gram index replaced): the reference."""
    for n in range(n_max, n_min - 1, -1):
        if len(seq) <= n:
            continue
        found = [seq[s + n:s + n + L] for s in range(len(seq) - n - 1, -1, -1) if seq[s:s + n] == seq[-n:]]
        if found:
            return found[:max_matches], n
    return [], 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=60), st.lists(st.integers(1, 6), min_size=1, max_size=20),
       st.integers(1, 3))
def test_ngram_index_finds_what_a_scan_of_the_context_finds(tokens, steps, min_ngram):
    """The lookup's n-gram index, grown round by round (1-6 tokens committed each), gives the continuations a scan of
    the whole context gives, most recent first; a shorter text without `reset` rebuilds it, and `reset` clears it."""
    d = PromptLookupDrafter(5, num_positions=4, max_ngram=3, min_ngram=min_ngram, max_matches=3)
    d.reset(None)
    end, i = 1, 0
    while end <= len(tokens):
        seq = tokens[:end]
        assert d._continuations(seq) == _scan_continuations(seq, 3, min_ngram, 4, 3)
        end, i = end + steps[i % len(steps)], i + 1
    short = tokens[: max(1, len(tokens) // 2)][::-1]  # another text, shorter, no reset
    assert d._continuations(short) == _scan_continuations(short, 3, min_ngram, 4, 3)
    d.reset(None)
    assert d._indexed == 0 and d._continuations(tokens) == _scan_continuations(tokens, 3, min_ngram, 4, 3)
