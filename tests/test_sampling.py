"""The sampling law at T in {0.5, 1.7} with top-k and top-p, against a reference computed here by hand.

Nothing in this file computes an expected law with caddtree's code: `reference_probs` is plain Python over the
logits (divide by T, keep the k largest, softmax, sort, cumulative sum), so a bug in `caddtree.accept` that plain
and tree decoding share (the temperature ignored, top-k or top-p keeping one token too many or too few) is seen.

Convention pinned (HF's logits-warper order): temperature first, then top-k (tokens whose tempered logit is below
the k-th largest are dropped), then softmax, then top-p on that distribution: the smallest set of most probable
tokens whose mass reaches p (>= p) is kept, i.e. a token is dropped iff the mass of the tokens before it already
reaches p; the kept probabilities are renormalised.

`law_test` is the one statistical routine: the sampling tests here and in test_engine.py use it, and
`test_law_test_rejects_biased_samplers_and_accepts_an_unbiased_one` shows it can fail.
"""
import collections
import math

import numpy as np
import pytest
import torch
from scipy import stats

from caddtree.accept import SamplingParams, target_choices, target_probs
from caddtree.costmodel import CostModel
from caddtree.drafter import LookupMixtureDrafter, PromptLookupDrafter
from caddtree.engine import Decoder
from conftest import RandomDrafter, make_tiny_target

ALPHA = 1e-3  # significance of every law test: a correct sampler fails one with probability 1e-3 per seed set
MARGIN = 1e-4  # a top-p / top-k boundary closer than this could flip between float32 and float64: refused


# ---------------------------------------------------------------------------------------------------------------
# The reference law, by hand
# ---------------------------------------------------------------------------------------------------------------

def reference_probs(logits, temperature: float, top_k: int = 0, top_p: float = 1.0, extra_top_p: int = 0,
                    top_k_shift: int = 0) -> list[float]:
    """One row of logits -> the processed sampling distribution, in float64 Python.

    extra_top_p / top_k_shift describe the alternatives whose power the tests state (top-p keeping that many tokens
    more, top-k keeping k + shift); 0 for the law itself. Asserts the example is not on a float boundary."""
    z = [float(x) / temperature for x in (logits.tolist() if torch.is_tensor(logits) else logits)]
    order = sorted(range(len(z)), key=lambda i: -z[i])  # most probable first
    kept = order
    if top_k > 0:
        k = min(max(top_k + top_k_shift, 1), len(z))
        if k < len(z):
            assert z[order[k - 1]] - z[order[k]] > MARGIN, "near-tie at the top-k boundary: pick another example"
        kept = order[:k]
    top = max(z[i] for i in kept)
    w = {i: math.exp(z[i] - top) for i in kept}
    total = sum(w.values())
    q = {i: w[i] / total for i in kept}
    if top_p < 1.0:
        nucleus, mass = [], 0.0
        for i in kept:
            nucleus.append(i)
            mass += q[i]
            if mass >= top_p:
                assert mass - top_p > MARGIN and top_p - (mass - q[i]) > MARGIN, "top-p boundary too close"
                break
        nucleus = kept[:len(nucleus) + extra_top_p]
        total = sum(q[i] for i in nucleus)
        q = {i: q[i] / total for i in nucleus}
    return [q.get(i, 0.0) for i in range(len(z))]


def reference_sequence_law(model, prompt: list[int], length: int, temperature: float, top_k: int, top_p: float,
                           **alternative) -> dict[tuple, float]:
    """The exact law of the first `length` sampled tokens after `prompt`: a fresh forward of the HF model (no
    cache) on every prefix of positive probability, each processed by `reference_probs`."""
    law = {}
    with torch.no_grad():
        def walk(seq, prob):
            if len(seq) == len(prompt) + length:
                law[tuple(seq[len(prompt):])] = prob
                return
            logits = model(torch.tensor([seq])).logits[0, -1].double()
            for t, q in enumerate(reference_probs(logits, temperature, top_k, top_p, **alternative)):
                if q > 0:
                    walk(seq + [t], prob * q)
        walk(list(prompt), 1.0)
    return law


# ---------------------------------------------------------------------------------------------------------------
# The law test
# ---------------------------------------------------------------------------------------------------------------

def law_test(hist: collections.Counter, law: dict, alpha: float = ALPHA) -> str | None:
    """Does a histogram of N draws follow `law` (outcome -> probability)? None if accepted, else why not.

    Rejects (1) any outcome of probability 0 (a sampler leaking mass outside the law's support), (2) a Pearson
    chi-square test at significance alpha: outcomes of expected count >= 5 are cells of their own, the rest are
    pooled into one cell (merged into the smallest cell if the pool's expectation is under 5); exact chi-square
    quantile (scipy)."""
    n = sum(hist.values())
    impossible = sorted(o for o in hist if law.get(o, 0.0) <= 0.0)
    if impossible:
        return f"outcomes of probability 0 drawn: {impossible[:5]} ({sum(hist[o] for o in impossible)} of {n})"
    by_expectation = sorted(law, key=lambda o: law[o])
    small = [o for o in by_expectation if law[o] * n < 5]
    cells = [[o] for o in by_expectation if law[o] * n >= 5]
    if small:
        if sum(law[o] for o in small) * n >= 5 or not cells:
            cells.insert(0, small)
        else:
            cells[0] = small + cells[0]
    obs = np.array([sum(hist[o] for o in c) for c in cells], dtype=np.float64)
    exp = np.array([sum(law[o] for o in c) for c in cells], dtype=np.float64) * n
    exp *= n / exp.sum()  # the law's mass is 1 up to rounding
    dof = len(cells) - 1
    if dof == 0:
        return None
    chi2 = float(((obs - exp) ** 2 / exp).sum())
    p_value = float(stats.chi2.sf(chi2, dof))
    if p_value < alpha:
        return f"chi2 = {chi2:.1f} with {dof} dof: p = {p_value:.2g} < {alpha}"
    return None


def assert_follows_law(hist: collections.Counter, law: dict, name: str = "") -> None:
    why = law_test(hist, law)
    assert why is None, f"{name}: {why}"


def multinomial_histogram(law: dict, n: int, gen: torch.Generator) -> collections.Counter:
    """n independent draws from `law` (a sampler that is exactly right, or exactly a stated alternative)."""
    outcomes = list(law)
    idx = torch.multinomial(torch.tensor([law[o] for o in outcomes], dtype=torch.float64), n, replacement=True,
                            generator=gen)
    return collections.Counter(outcomes[i] for i in idx.tolist())


# ---------------------------------------------------------------------------------------------------------------
# (a) Unit level: target_probs / target_choices
# ---------------------------------------------------------------------------------------------------------------

# one explicit row of 8 logits (not sorted, so the sort matters); no boundary within MARGIN for the configs below
ROW = [0.5, 2.0, -1.0, 1.0, -1.5, 1.6, 0.0, -0.4]
# the alternatives (planted bugs) whose power the tests state, as arguments of reference_probs
ALTERNATIVES = {"temperature ignored": {"temperature": 1.0}, "top-p one token extra": {"extra_top_p": 1},
                "top-k k-1": {"top_k_shift": -1}, "top-k k+1": {"top_k_shift": 1}}
# (T, top_k, top_p) -> the alternatives that change this config's law on ROW by > 0.02 in some probability (top-p
# after top-k hides some top-k shifts, so the combined configs come in pairs that together see every alternative)
CONFIGS = {(0.5, 0, 1.0): ["temperature ignored"],
           (1.7, 0, 1.0): ["temperature ignored"],
           (0.5, 3, 1.0): ["temperature ignored", "top-k k-1", "top-k k+1"],
           (1.7, 5, 1.0): ["temperature ignored", "top-k k-1", "top-k k+1"],
           (0.5, 0, 0.8): ["temperature ignored", "top-p one token extra"],
           (1.7, 0, 0.75): ["temperature ignored", "top-p one token extra"],
           (0.5, 3, 0.9): ["temperature ignored", "top-p one token extra", "top-k k+1"],
           (0.5, 4, 0.9): ["temperature ignored", "top-p one token extra", "top-k k-1"],
           (1.7, 4, 0.7): ["temperature ignored", "top-p one token extra", "top-k k-1"],
           (1.7, 5, 0.75): ["temperature ignored", "top-p one token extra", "top-k k+1"]}
COMBINED = [c for c in CONFIGS if c[1] > 0 and c[2] < 1.0]


def alternative_probs(row, config, name):
    kw = dict(zip(("temperature", "top_k", "top_p"), config)) | ALTERNATIVES[name]
    return reference_probs(row, kw.pop("temperature"), **kw)


def test_the_combined_configs_see_every_alternative_at_both_temperatures():
    for t in (0.5, 1.7):
        seen = {a for c in COMBINED if c[0] == t for a in CONFIGS[c]}
        assert seen == set(ALTERNATIVES), (t, seen)


@pytest.mark.parametrize("config", list(CONFIGS))
def test_target_probs_equal_the_hand_computed_law(config):
    """Exact probabilities: target_probs on one explicit row and on a batch of random rows (each row processed on
    its own) equals the hand-computed law to 1e-6. Power: each alternative listed for the config moves some
    probability by more than 0.02 (asserted here on the reference), 2e4 times the tolerance."""
    temperature, top_k, top_p = config
    params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p)
    got = target_probs(torch.tensor([ROW]), params)[0].double()
    want = torch.tensor(reference_probs(ROW, temperature, top_k, top_p), dtype=torch.float64)
    assert torch.allclose(got, want, atol=1e-6), (got, want)
    for name in CONFIGS[config]:
        alt = torch.tensor(alternative_probs(ROW, config, name), dtype=torch.float64)
        assert (alt - want).abs().max() > 0.02, name
    # a batch: rows of random logits, each against its own reference (a wrong dim in sort/topk/cumsum mixes rows)
    rows = 2.0 * torch.randn(12, 10, generator=torch.Generator().manual_seed(7))
    got = target_probs(rows, params).double()
    checked = 0
    for r in range(rows.shape[0]):
        try:
            want = torch.tensor(reference_probs(rows[r], temperature, top_k, top_p), dtype=torch.float64)
        except AssertionError:  # this random row lies on a float boundary: its kept set is not well defined
            continue
        assert torch.allclose(got[r], want, atol=1e-6), (r, got[r], want)
        checked += 1
    assert checked >= 10


def unit_law(row, config, name=None):
    probs = reference_probs(row, *config) if name is None else alternative_probs(row, config, name)
    return {(t,): q for t, q in enumerate(probs) if q > 0}


UNIT_N = 20000


@pytest.mark.parametrize("config", COMBINED)
def test_target_choices_draw_from_the_hand_computed_law(config):
    """target_choices (the draw every decoder makes) on two interleaved rows, N = 20000 draws per row, law test at
    α = 1e-3 per row. Row A = ROW, row B = ROW reversed: a sampler that mixes rows fails. Power against each
    alternative listed in CONFIGS for the config: 1.000 (500 of 500 simulated 20000-draw histograms from the
    alternative law rejected, for every combined config; the law itself: 0 to 1 of 500 rejected);
    `test_unit_level_power` repeats 20 of each."""
    temperature, top_k, top_p = config
    params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p)
    a, b = ROW, ROW[::-1]
    logits = torch.tensor([a, b]).repeat(UNIT_N, 1)  # [2N, V]: rows alternate A, B
    draws = target_choices(logits, params, torch.Generator().manual_seed(11)).tolist()
    for row, got in ((a, draws[0::2]), (b, draws[1::2])):
        assert_follows_law(collections.Counter((t,) for t in got), unit_law(row, config), f"{config}")


def test_unit_level_power():
    """The power claimed above, checked on 20 simulated histograms per (config, alternative): 20000 draws from the
    alternative law (torch.multinomial on the reference, not caddtree) are rejected by `law_test` every time, and
    20 histograms from the law itself are all accepted."""
    gen = torch.Generator().manual_seed(3)
    for config in COMBINED:
        law = unit_law(ROW, config)
        assert all(law_test(multinomial_histogram(law, UNIT_N, gen), law) is None for _ in range(20)), config
        for name in CONFIGS[config]:
            alt = unit_law(ROW, config, name)
            assert all(law_test(multinomial_histogram(alt, UNIT_N, gen), law) for _ in range(20)), (config, name)


# ---------------------------------------------------------------------------------------------------------------
# (b) End to end: the first two tokens of plain, DDTree and CaDDTree decoding on a tiny random model
# ---------------------------------------------------------------------------------------------------------------

E2E_SEED, E2E_VOCAB, E2E_PROMPT = 4, 6, [2, 3, 4, 5, 2, 3]
E2E_N = 500
E2E_CONFIGS = {"T0.5": (0.5, 3, 0.7), "T1.7": (1.7, 4, 0.7)}


def decoders(target):
    cv = np.r_[10.0, 10.0 + 0.1 * np.arange(1, 17)]  # cheap extra nodes: CaDDTree verifies a few nodes a round
    cost = CostModel([1], cv[None], np.zeros(17), [0.0], [0.0])
    V = target.vocab_size
    return {"plain": Decoder(target),
            "ddtree": Decoder(target, RandomDrafter(V, num_positions=3, seed=1), method="ddtree", budget=8),
            "caddtree": Decoder(target, RandomDrafter(V, num_positions=3, seed=2), method="caddtree",
                                cost_model=cost)}


def first_tokens(decoder, prompt, params: SamplingParams, k: int, n: int, seed0: int) -> tuple[collections.Counter, int]:
    """(histogram of the first k tokens over n seeded generations, first rounds whose tree had a token accepted)."""
    hist, accepted = collections.Counter(), 0
    for s in range(n):
        out = decoder.generate(torch.tensor(prompt), k, params, seed=seed0 + s)
        hist[tuple(out.tokens)] += 1
        accepted += out.rounds[0].accepted > 0
    return hist, accepted


@pytest.mark.parametrize("config", list(E2E_CONFIGS))
def test_first_tokens_of_every_decoder_follow_the_hand_computed_law(config):
    """The first two generated tokens (the root's draw, then a draw at an accepted tree node or the next round's
    root) of plain, DDTree and CaDDTree decoding follow the law computed from fresh forwards of the tiny target
    (make_tiny_target(4, vocab=6, layers=1)) processed by hand. N = 500 generations per decoder, law test at
    α = 1e-3 each (a correct decoder fails with probability 1e-3 per seed set; the seeds are fixed).

    Power, simulated once (2000 histograms of N = 500 draws from each alternative law, the same `law_test`; the
    law itself: rejected 0.05% (T0.5) and 0.15% (T1.7) of the time, α = 0.1%):
      T0.5 (T=0.5, top-k 3, top-p 0.7; 4 outcomes): temperature ignored 1.000 (11.9% of its mass lies outside the
        law's support; the chi-square alone on the possible outcomes 0.10); top-p one token extra 1.000 (32.9%
        outside); top-k k-1 1.000 (chi-square alone); top-k k+1 1.000 (23.9% outside).
      T1.7 (T=1.7, top-k 4, top-p 0.7; 8 outcomes): temperature ignored 1.000 (chi-square alone); top-p one token
        extra 1.000 (30.4% outside); top-k k-1 1.000 (chi-square alone); top-k k+1 1.000 (9.0% outside: some
        impossible outcome in a histogram of 500 with probability 1 - 0.91^500 > 1 - 1e-20).
    """
    temperature, top_k, top_p = E2E_CONFIGS[config]
    params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p)
    target = make_tiny_target(E2E_SEED, vocab=E2E_VOCAB, layers=1, eos=None)
    law = reference_sequence_law(target.model, E2E_PROMPT, 2, temperature, top_k, top_p)
    assert abs(sum(law.values()) - 1.0) < 1e-9
    failed = {}
    for name, dec in decoders(target).items():  # every decoder is run, so a failure names all that fail
        hist, accepted = first_tokens(dec, E2E_PROMPT, params, 2, E2E_N, seed0=10_000)
        why = law_test(hist, law)
        if why is not None:
            failed[name] = why
        if name != "plain":  # the second token came from a tree node's draw often enough to be tested
            assert accepted >= 0.2 * E2E_N, (name, accepted)
    assert not failed, f"{config}: {failed}"


def test_law_test_rejects_biased_samplers_and_accepts_an_unbiased_one():
    """`law_test` is able to fail, and does not fail by default. On the T1.7 law of the end-to-end test, N = 500:
    200 histograms drawn from the law itself: at most 2 rejected (α = 1e-3: expected 0.2); 200 from each biased
    sampler (temperature ignored, whose support lies inside the law's, so the chi-square alone must reject it; top-p
    keeping one extra token): at least 190 rejected (simulated power 1.000 for both). And a real biased decoder: plain
    decoding run at T = 1 (what an ignored temperature produces) is rejected against the T = 1.7 law."""
    temperature, top_k, top_p = E2E_CONFIGS["T1.7"]
    target = make_tiny_target(E2E_SEED, vocab=E2E_VOCAB, layers=1, eos=None)
    law = reference_sequence_law(target.model, E2E_PROMPT, 2, temperature, top_k, top_p)
    ignored_t = reference_sequence_law(target.model, E2E_PROMPT, 2, 1.0, top_k, top_p)
    extra_p = reference_sequence_law(target.model, E2E_PROMPT, 2, temperature, top_k, top_p, extra_top_p=1)
    assert set(ignored_t) <= set(law)  # its draws are all possible under the law: only the chi-square can reject
    gen = torch.Generator().manual_seed(5)
    rejected = sum(law_test(multinomial_histogram(law, E2E_N, gen), law) is not None for _ in range(200))
    assert rejected <= 2, rejected
    for name, alt in (("temperature ignored", ignored_t), ("top-p +1", extra_p)):
        rejected = sum(law_test(multinomial_histogram(alt, E2E_N, gen), law) is not None for _ in range(200))
        assert rejected >= 190, (name, rejected)
    at_t1 = SamplingParams(temperature=1.0, top_k=top_k, top_p=top_p)
    biased, _ = first_tokens(Decoder(target), E2E_PROMPT, at_t1, 2, E2E_N, seed0=10_000)
    why = law_test(biased, law)
    assert why is not None and why.startswith("chi2"), why


# ---------------------------------------------------------------------------------------------------------------
# (c) Every drafter at the usual sampling settings, with power against any rule 0.03 off in total variation
# ---------------------------------------------------------------------------------------------------------------

TV_N = 4000
TV_PROMPT = [2, 3, 4, 5, 2, 3, 4, 5, 2, 3]  # repeats: prompt lookup proposes (its drafts are accepted and rejected)
TV_CONFIGS = {"T0.7": (0.7, 4, 0.95), "T1.0": (1.0, 5, 0.95)}


def tv_alternatives(law: dict, delta: float = 0.03) -> dict[str, dict]:
    """Laws at total variation `delta` from `law` that a chi-square finds hardest: `delta` of mass moved from the
    most likely outcome to the second, and from it to the least likely possible outcome (no impossible outcome, so
    only the chi-square can reject them)."""
    order = sorted(law, key=law.get, reverse=True)
    out = {}
    for name, dst in (("top -> second", order[1]), ("top -> rarest", order[-1])):
        alt = dict(law)
        alt[order[0]] -= delta
        alt[dst] += delta
        out[name] = alt
    return out


def tv_decoders(target):
    cv = np.r_[10.0, 10.0 + 0.1 * np.arange(1, 17)]
    cost = CostModel([1], cv[None], np.zeros(17), [0.0], [0.0])
    V = target.vocab_size
    mix = LookupMixtureDrafter(RandomDrafter(V, num_positions=3, seed=3), PromptLookupDrafter(V, num_positions=3))
    return {"ddtree": Decoder(target, RandomDrafter(V, num_positions=3, seed=1), method="ddtree", budget=8),
            "caddtree": Decoder(target, RandomDrafter(V, num_positions=3, seed=2), method="caddtree", cost_model=cost),
            "lookup": Decoder(target, PromptLookupDrafter(V, num_positions=3), method="ddtree", budget=6),
            "mix": Decoder(target, mix, method="caddtree", cost_model=cost)}


@pytest.mark.parametrize("config", list(TV_CONFIGS))
def test_every_drafter_keeps_the_law_with_power_against_tv_003(config):
    """The first two tokens of DDTree (random drafts), CaDDTree, prompt lookup and the lookup mix at T = 0.7 (top-k 4,
    top-p 0.95) and T = 1.0 (top-k 5, top-p 0.95) on make_tiny_target(4, vocab=6, layers=1) follow the hand-computed
    law: N = 4000 generations per decoder, law test at α = 1e-3.

    Power against a rule at total variation 0.03 from the law (`tv_alternatives`: mass moved between possible
    outcomes, so only the chi-square can see it), simulated once with 1000 histograms of N draws: T0.7 (12
    outcomes) top -> second 0.930, top -> rarest 1.000; T1.0 (19 outcomes) 0.956 and 1.000; the law itself rejected
    0.3% and 0.2% of the time. `test_tv_003_power_is_at_least_09` re-checks ≥ 0.9 on 1000 histograms."""
    temperature, top_k, top_p = TV_CONFIGS[config]
    params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p)
    target = make_tiny_target(E2E_SEED, vocab=E2E_VOCAB, layers=1, eos=None)
    law = reference_sequence_law(target.model, TV_PROMPT, 2, temperature, top_k, top_p)
    failed = {}
    for name, dec in tv_decoders(target).items():
        hist, accepted = first_tokens(dec, TV_PROMPT, params, 2, TV_N, seed0=20_000)
        why = law_test(hist, law)
        if why is not None:
            failed[name] = why
        assert accepted >= 0.1 * TV_N, (name, accepted)  # tree nodes decided the second token often enough
    assert not failed, f"{config}: {failed}"


@pytest.mark.parametrize("config", list(TV_CONFIGS))
def test_tv_003_power_is_at_least_09(config):
    temperature, top_k, top_p = TV_CONFIGS[config]
    target = make_tiny_target(E2E_SEED, vocab=E2E_VOCAB, layers=1, eos=None)
    law = reference_sequence_law(target.model, TV_PROMPT, 2, temperature, top_k, top_p)
    gen = torch.Generator().manual_seed(7)
    for name, alt in tv_alternatives(law).items():
        power = np.mean([law_test(multinomial_histogram(alt, TV_N, gen), law) is not None for _ in range(1000)])
        assert power >= 0.9, (config, name, power)


# ---------------------------------------------------------------------------------------------------------------
# The CPU draw kernel (sample.cpp), which the decoders use on CPU: the same law
# ---------------------------------------------------------------------------------------------------------------

def _kernel():
    from caddtree import kernels
    if not kernels.packing_available():
        pytest.skip("the CPU kernels are not built here")
    return kernels


@pytest.mark.parametrize("config", list(CONFIGS))
def test_cpu_draw_kernel_law_equals_the_hand_computed_law(config):
    """`kernels.processed_law` (what `kernels.sample_processed` draws from) on ROW and on random rows: every
    probability within 1e-6 of the hand-computed law, so the kept set is the same. Power as in
    `test_target_probs_equal_the_hand_computed_law`: each listed alternative moves a probability by > 0.02."""
    kernels = _kernel()
    params = SamplingParams(*config)
    rows = [ROW] + (2.0 * torch.randn(12, 10, generator=torch.Generator().manual_seed(7))).tolist()
    checked = 0
    for row in rows:
        try:
            want = torch.tensor(reference_probs(row, *config), dtype=torch.float64)
        except AssertionError:  # on a float boundary: the kept set is not well defined
            continue
        tokens, probs = kernels.processed_law(torch.tensor(row), params)
        got = torch.zeros(len(row), dtype=torch.float64).index_put_((tokens,), probs)
        assert torch.allclose(got, want, atol=1e-6), (row, got, want)
        checked += 1
    assert checked >= 10


@pytest.mark.parametrize("config", COMBINED)
def test_cpu_draw_kernel_draws_from_the_hand_computed_law(config):
    """`kernels.sample_processed`, 20000 draws on each of two rows (ROW and ROW reversed), law test at α = 1e-3 per
    row: the same N, α and alternatives as `test_target_choices_draw_from_the_hand_computed_law`, so the same power
    (1.000 against each alternative listed in CONFIGS, `test_unit_level_power`)."""
    kernels = _kernel()
    params = SamplingParams(*config)
    gen = torch.Generator().manual_seed(11)
    for row in (ROW, ROW[::-1]):
        logits = torch.tensor(row)
        got = [kernels.sample_processed(logits, params, gen) for _ in range(UNIT_N)]
        assert_follows_law(collections.Counter((t,) for t in got), unit_law(row, config), f"{config}")


@pytest.mark.parametrize("top_k, top_p", [(0, 0.95), (0, 0.5), (50, 0.9), (0, 1.0), (1000, 1.0)])
def test_cpu_draw_kernel_law_on_a_full_vocabulary_with_ties(top_k, top_p):
    """A 49152-token row (SmolLM2's vocabulary) with blocks of tied logits, ties straddling the top-p and top-k
    boundaries included: the kernel keeps exactly `target_probs`' support (every token tied with the least kept one)
    with the same probabilities to 1e-7, at T = 0.7 and 1.3."""
    kernels = _kernel()
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(49152, generator=gen) * 2.5
    x[torch.randperm(49152, generator=gen)[:3000]] = x.max() - 1.5  # a large tied block near the top
    x[torch.randperm(49152, generator=gen)[:40]] = x.max() + 0.5      # and a small one at the top
    for t in (0.7, 1.3):
        params = SamplingParams(temperature=t, top_k=top_k, top_p=top_p)
        want = target_probs(x[None], params)[0].double()
        tokens, probs = kernels.processed_law(x, params)
        got = torch.zeros(49152, dtype=torch.float64).index_put_((tokens,), probs)
        assert torch.equal(got > 0, want > 0), (t, int((got > 0).sum()), int((want > 0).sum()))
        assert torch.allclose(got, want, atol=1e-7)


@pytest.mark.parametrize("temperature", [1e-60, 1e-46, 1e-45])
def test_temperatures_below_fp32_give_the_tied_maxima_uniformly(temperature):
    """A temperature that rounds to 0 in fp32 (1e-60, 1e-46) would make (x - max) / T a 0 / 0: the reference law
    (`target_probs`), its fast draw (`sample_token`) and the CPU kernel all take its limit instead, the tied maxima
    uniformly (1e-45, fp32's least positive value, gives the same law by division). Draws: 2000 of each, both maxima
    seen and nothing else (a draw stuck on one maximum fails with probability 2^-1999)."""
    from caddtree.accept import sample_token
    row = torch.tensor([0.5, 2.0, -1.0, 2.0, 1.9999])
    params = SamplingParams(temperature=temperature)
    assert target_probs(row[None], params)[0].tolist() == [0.0, 0.5, 0.0, 0.5, 0.0]
    gen = torch.Generator().manual_seed(0)
    draws = {sample_token(row, params, gen) for _ in range(2000)}
    assert draws == {1, 3}
    kernels = _kernel()
    tokens, probs = kernels.processed_law(row, params)
    assert sorted(tokens.tolist()) == [1, 3] and probs.tolist() == [0.5, 0.5]
    assert {kernels.sample_processed(row, params, gen) for _ in range(2000)} == {1, 3}
