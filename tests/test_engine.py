"""Losslessness of every decoding path on tiny random targets, KV compaction, and the sampling distribution."""
import collections
import types

import pytest
import torch

from caddtree.accept import SamplingParams
from caddtree.drafter import LookupMixtureDrafter, PromptLookupDrafter
from caddtree.engine import SAMPLING_ONLY, Decoder
from caddtree.verify import commit_path, verify_tree
from caddtree.errors import CaddtreeError
from caddtree.tree import build_tree
from conftest import FeatureLog, OracleDrafter, RandomDrafter, make_tiny_target, prompt, reference_greedy
from test_sampling import assert_follows_law, first_tokens, law_test, multinomial_histogram, reference_sequence_law


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
    """After a verify, committing any accepted path (every node's, and none) leaves the cache a fresh prefill of the
    committed text would: rows already in place (the empty path, the tree's first nodes in order) are only cut, the
    others moved (`commit_path`'s in_place)."""
    target = make_tiny_target(3)
    target.hidden_layers = [0, 1]
    p = prompt(3, 10)
    lp = torch.log_softmax(3 * torch.randn(4, target.vocab_size, generator=torch.Generator().manual_seed(0)), -1)
    tree = build_tree(lp, 12)
    paths = [[]]
    for leaf in range(len(tree)):
        path, node = [], leaf
        while node >= 0:
            path.insert(0, node)
            node = int(tree.parents[node])
        paths.append(path)
    assert [0, 1] in paths and any(path != list(range(len(path))) for path in paths)  # cut only; moved
    for path in paths:
        cache = target.new_cache()
        target.forward(p[:-1], cache)
        logits, feats = verify_tree(target, cache, int(p[-1]), tree)
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
        assert torch.allclose(after, after_ref, atol=1e-4), path


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


SAMPLING_SEED, SAMPLING_PROMPT, SAMPLING_N = 5, [2, 3, 4, 5, 2, 3], 600
SAMPLING = dict(temperature=1.0, top_k=5, top_p=0.95)


def sampling_law(target, **change):
    """Exact law of the first 3 tokens, by fresh forwards processed by hand (test_sampling.reference_probs)."""
    kw = SAMPLING | change
    return reference_sequence_law(target.model, SAMPLING_PROMPT, 3, kw.pop("temperature"), kw.pop("top_k"),
                                  kw.pop("top_p"), **kw)


def test_sampling_distribution_matches_plain_sampling():
    """Tree sampling must reproduce the plain-sampling law of the first 3 tokens (depth-2 accepted paths).

    The exact law comes from the model's forwards processed by hand (not caddtree.accept); plain decoding and
    DDTree with an oracle drafter are each compared to it with `test_sampling.law_test` (no outcome of
    probability 0; Pearson chi-square, cells of expected count >= 5, the rest pooled) at α = 1e-3, N = 600.
    A wrong acceptance rule (e.g. accepting the drafter's token without a target draw) shifts the law by far more
    than this tolerance; `test_sampling_test_detects_a_biased_sampler` shows the same routine rejecting biased
    samplers. The other temperatures, top-k/top-p and CaDDTree: tests/test_sampling.py.
    """
    target = make_tiny_target(SAMPLING_SEED, vocab=6, layers=1, eos=None)
    params = SamplingParams(**SAMPLING)
    law = sampling_law(target)
    tree = Decoder(target, OracleDrafter(target, 3, seed=1, miss_rate=0.5), method="ddtree", budget=6)
    for name, dec in (("plain", Decoder(target)), ("tree", tree)):
        hist, _ = first_tokens(dec, SAMPLING_PROMPT, params, 3, SAMPLING_N, seed0=1000)
        assert_follows_law(hist, law, name)


def test_sampling_test_detects_a_biased_sampler():
    """The law test above runs `law_test`; here it is run on biased samplers' histograms (N = 600, the law of
    the test above) and must reject them, while an unbiased sampler passes:
    - greedy decoding (a real decoder run with SamplingParams(): one outcome, every time) is rejected;
    - draws from the law at T = 0.6 instead of 1 (same support: the chi-square alone must reject; simulated power
      1.000) and at top-p 0.9 instead of 0.95 (simulated power 1.000): 50 histograms each, at least 48 rejected;
    - 50 histograms drawn from the law itself: at most 1 rejected (α = 1e-3: expected 0.05).
    """
    target = make_tiny_target(SAMPLING_SEED, vocab=6, layers=1, eos=None)
    law = sampling_law(target)
    greedy, _ = first_tokens(Decoder(target), SAMPLING_PROMPT, SamplingParams(), 3, 20, 0)
    assert len(greedy) == 1  # deterministic: N draws of greedy decoding are N copies of its one outcome
    greedy = collections.Counter({next(iter(greedy)): SAMPLING_N})
    assert law_test(greedy, law) is not None
    gen = torch.Generator().manual_seed(0)
    rejected = sum(law_test(multinomial_histogram(law, SAMPLING_N, gen), law) is not None for _ in range(50))
    assert rejected <= 1, rejected
    for change in (dict(temperature=0.6), dict(top_p=0.9)):
        biased = sampling_law(target, **change)
        assert set(biased) <= set(law)  # nothing the law forbids: the chi-square has to see the bias
        rejected = sum(law_test(multinomial_histogram(biased, SAMPLING_N, gen), law) is not None for _ in range(50))
        assert rejected >= 48, (change, rejected)


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
    # the draft gate alone: the speculation gate (on by default) would keep some rounds plain as measured times say
    dec = Decoder(target, mix, method="caddtree", cost_model=cost, speculation_gate=False)
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


@pytest.mark.parametrize("seed", range(3))
def test_under_sampling_the_draft_gate_carries_what_it_learned_to_the_next_generation(seed):
    """carry_gate (default under sampling), a costly stage 2 (5 plain steps): under sampling the second generation of
    the same setting goes on with the gate the first one left (its observations kept and added to), another setting
    gets its own fresh gate, and with carry_gate=False (as greedily) every generation starts a fresh gate, warm-up
    included."""
    import numpy as np

    from caddtree.costmodel import CostModel
    target = make_tiny_target(seed)
    p = prompt(seed, 16)
    cv = np.r_[10.0, 10.0 + 0.5 * np.arange(1, 17)]
    cost = CostModel([1], cv[None], np.zeros(17), [50.0], [0.0], cheap_draft=[0.1])
    mix = LookupMixtureDrafter(FeatureLog(target.vocab_size, num_positions=4, seed=seed),
                               PromptLookupDrafter(target.vocab_size, num_positions=4))
    t1, t07 = SamplingParams(temperature=1.0), SamplingParams(temperature=0.7)

    def stage2(dec, params, s):
        out = dec.generate(p, 100, params, seed=s)
        return [r.second_stage for r in out.rounds if r.second_stage is not None], dec.gate

    def warm(ran):  # a fresh gate runs stage 2 in its first 3 rounds (fewer where the text ended first)
        return ran[:3] == [True] * min(3, len(ran))

    carried, fresh = (Decoder(target, mix, "caddtree", cost_model=cost, carry_gate=c) for c in (SAMPLING_ONLY, False))
    for dec in (carried, fresh):
        first, gate = stage2(dec, t1, 0)
        learned = list(gate.seen)
        assert warm(first) and sum(learned) > 0  # warm-up: stage 2 ran and was observed
        second, again = stage2(dec, t1, 1)
        if dec is carried:  # the same gate, its observations kept
            assert again is gate and all(a >= b for a, b in zip(gate.seen, learned))
            other, third = stage2(dec, t07, 2)
            assert third is not gate and warm(other)
            assert stage2(dec, t1, 3)[1] is gate
        else:
            assert again is not gate and warm(second) and sum(again.seen) <= sum(second)


def test_round_times_add_up_to_the_decode_time_and_leave_out_the_callers(monkeypatch):
    """On a fake clock that only the gate's learning (after the verify, once the output passes a round) and the
    caller's stream callback move: the rounds' parts count the first and not the second."""
    import numpy as np

    import caddtree.engine as eng
    from caddtree.costmodel import CostModel
    clock, observed = [0.0], []
    monkeypatch.setattr(eng, "now", lambda device: clock[0])
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
        dec = Decoder(target, mix, method="caddtree", cost_model=cost, gate=mode, speculation_gate=False)
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


def test_context_window_is_used_to_the_last_token():
    """The last new token is never fed back: a prompt of exactly the window may ask for 1 token, and P + N - 1 =
    window fits, with every method; one more is refused."""
    target = make_tiny_target(0, max_pos=32)
    for dec in (Decoder(target), Decoder(target, RandomDrafter(64), method="ddtree", budget=4)):
        full = prompt(0, 32)
        assert dec.generate(full, 1).tokens == reference_greedy(target, full, 1)
        p = prompt(1, 20)
        assert dec.generate(p, 13).tokens == reference_greedy(target, p, 13)
        with pytest.raises(CaddtreeError, match="lower --max-new-tokens to 13"):
            dec.generate(p, 14)
    with pytest.raises(CaddtreeError, match="shorten the prompt"):
        Decoder(target).generate(prompt(0, 33), 1)


def test_temperatures_that_round_to_zero_act_as_greedy_and_inf_nan_are_refused():
    target = make_tiny_target(0)
    p = prompt(2)
    want = reference_greedy(target, p, 12)
    for t in (1e-60, 1e-45, 1e-30, 1e-12):  # 1e-60: below fp32's least positive value
        for dec in (Decoder(target), Decoder(target, RandomDrafter(64), method="ddtree", budget=4)):
            assert dec.generate(p, 12, SamplingParams(temperature=t), seed=0).tokens == want, t
    for t in (float("inf"), float("nan"), -1.0):
        with pytest.raises(ValueError, match="temperature must be >= 0 and finite"):
            SamplingParams(temperature=t)


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("draft_ms", [0.1, 60.0])
def test_speculation_gate_drafts_where_it_pays_and_decodes_plainly_elsewhere(seed, draft_ms):
    """With the speculation gate on (the default, greedy and sampled; checked greedily here, so the output can be
    compared token for token): the output is plain greedy decoding's, the drafter still gets every feature row
    exactly once (`FeatureLog`), and a draft priced at 6 plain steps stops being paid after the warm-up (re-checks
    only), while a nearly free one keeps drafting most rounds. Off (`speculation_gate=False`), every round drafts."""
    import numpy as np

    from caddtree.costmodel import CostModel
    target = make_tiny_target(seed)
    p = prompt(seed, 16)
    expect = reference_greedy(target, p, 80)
    cv = np.r_[10.0, 10.0 + 0.5 * np.arange(1, 17)]
    cost = CostModel([1], cv[None], np.zeros(17), [draft_ms], [0.0])
    oracle = OracleDrafter(target, num_positions=4, seed=seed)
    for drafter in (FeatureLog(target.vocab_size, num_positions=4, seed=seed), oracle):
        dec = Decoder(target, drafter, method="caddtree", cost_model=cost, speculation_gate=True)
        out = dec.generate(p, 80)
        assert out.tokens == expect
        drafted = [r.drafted for r in out.rounds[:-1]]  # the last round may have no room to draft
        assert all(isinstance(d, bool) for d in drafted)
        assert all(r.tree_size == 0 and r.draft_ms == 0.0 for r in out.rounds if r.drafted is False)
        if draft_ms == 60.0:
            assert drafted[:4] == [True] * 4 and sum(drafted) <= 4 + len(drafted) // 8, drafted
        elif drafter is oracle:
            assert sum(drafted) > 0.7 * len(drafted), drafted
    assert Decoder(target, oracle, "caddtree", cost_model=cost).spec_gate is not None  # the default: on
    off = Decoder(target, oracle, "caddtree", cost_model=cost, speculation_gate=False).generate(p, 8)
    assert all(r.drafted is None for r in off.rounds)
    bare = types.SimpleNamespace(propose=oracle.propose, target_layers=[], reset=lambda ids: None)
    assert Decoder(target, bare, "caddtree", cost_model=cost).spec_gate is None  # no skip(): off unless asked for


def test_speculation_gate_prices_each_draft_without_the_profiles_overheads():
    """The speculation gate weighs its own measured overheads, so each draft reaches it at C_d + C_v(n) (+ o_n · n):
    a choice of n = 0, which the policy prices with the plain option's o_plain, must not come with o_plain - o
    taken off (a plain choice looked 1.25 ms cheaper than a plain step here, and the gate kept drafting)."""
    import numpy as np

    from caddtree.costmodel import CostModel
    target, p = make_tiny_target(0), prompt(0, 16)
    cv = np.r_[10.0, 10.0 + 0.5 * np.arange(1, 17)]
    cost = CostModel([1], cv[None], np.zeros(17), [2.0], [1.5], overhead_plain=[0.25])
    plain_choices = 0
    for sharpness in (0.1, 3.0):  # flat marginals: the plain option chosen; peaked ones: trees
        dec = Decoder(target, RandomDrafter(target.vocab_size, 4, seed=0, sharpness=sharpness), "caddtree",
                      cost_model=cost, speculation_gate=True)
        seen, observe = [], dec.spec_gate.observe
        dec.spec_gate.observe = lambda tokens_ms, plain_ms, tree: (seen.append((tokens_ms, plain_ms, tree)),
                                                                   observe(tokens_ms, plain_ms, tree=tree))
        drafted = [r for r in dec.generate(p, 40).rounds if r.drafted]
        assert len(seen) == len(drafted) > 0
        for (tokens_ms, plain_ms, tree), r in zip(seen, drafted):
            assert plain_ms == pytest.approx(10.0) and tokens_ms[-1][1] == pytest.approx(2.0 + cv[r.tree_size])
            assert tree == (r.tree_size > 0)  # the margin's tree share counts the rounds that verified a tree
        plain_choices += sum(r.tree_size == 0 for r in drafted)
    assert 0 < plain_choices


def test_caddtree_options_refuse_unknown_values():
    import numpy as np

    from caddtree.costmodel import CostModel
    target = make_tiny_target(0)
    cost = CostModel([1], np.r_[10.0, 10.5][None], np.zeros(2), [2.0], [0.0])
    for kw in ({"calibrate_phi": "always"}, {"speculation_gate": "on"}, {"carry_gate": "yes"}):
        with pytest.raises(CaddtreeError, match=next(iter(kw))):
            Decoder(target, RandomDrafter(target.vocab_size, 4), method="caddtree", cost_model=cost, **kw)
