"""CaDDTree stop rule: the greedy first-failure stop is the brute-force argmax of θ over n, and θ is unimodal."""
import time

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from caddtree.budget import BudgetChoice, TreeStop, choose_tree_size
from caddtree.costmodel import CostModel, fit_cost_model
from caddtree.tree import build_tree

REL = 1e-9  # float round-off on θ comparisons


def random_tree(seed: int, n_nodes: int):
    g = torch.Generator().manual_seed(seed)
    L = int(torch.randint(1, 9, (1,), generator=g))
    V = int(torch.randint(2, 40, (1,), generator=g))
    scale = float(torch.empty(1).uniform_(0.1, 8.0, generator=g))  # flat .. peaky marginals
    lp = torch.log_softmax(torch.randn(L, V, generator=g) * scale, dim=-1)
    return build_tree(lp, n_nodes)


def random_cost(seed: int, n_max: int, flat_frac: float, jump: float = 0.0, group: int = 1,
                pass_jump: float = 0.0, monotone: bool = False) -> CostModel:
    """Random C_v over 0..n_max: convex non-decreasing (sorted non-negative increments, some exactly 0; unsorted if
    `monotone`: any non-decreasing curve, concave stretches and steps included, as the monotone fit gives), plus
    an extra `jump` between the plain step n = 0 and n = 1 (what the fit allows: a different kernel path), plus
    `pass_jump` (x C_v(0)) per extra pass of `group` rows."""
    rng = np.random.default_rng(seed)
    inc = rng.exponential(rng.uniform(0.01, 5.0), n_max) * (rng.random(n_max) > flat_frac)
    cv = rng.uniform(1.0, 50.0) + np.r_[0.0, np.cumsum(inc if monotone else np.sort(inc))]
    cv[1:] += jump * cv[0]
    return CostModel([512], cv[None], np.zeros(n_max + 1), [rng.uniform(0.0, 10.0)], [rng.uniform(0.0, 2.0)],
                     row_group=group, pass_ms=[pass_jump * cv[0]],
                     verify_fit="monotone" if monotone else "convex")


def brute_theta(log_weights, cost: CostModel, ctx: int, cap: int) -> np.ndarray:
    """θ_n for n = 0..cap, one n at a time (independent of the vectorised code)."""
    d = [float(np.exp(w)) for w in np.asarray(log_weights, dtype=np.float64)[:cap]]
    base = cost.draft_ms(ctx) + cost.overhead_ms(ctx)
    return np.array([(1.0 + sum(d[:n])) / (base + cost.verify_ms(n, ctx)) for n in range(cap + 1)])


def assert_is_argmax(choice: BudgetChoice, theta: np.ndarray):
    best = theta.max()
    near = np.flatnonzero(theta >= best * (1 - REL))
    assert near[0] <= choice.n <= near[-1], (choice.n, theta)
    top2 = np.sort(theta)[-2:] if len(theta) > 1 else None
    if top2 is not None and top2[1] - top2[0] > best * REL:  # a unique optimum: exactly it
        assert choice.n == int(np.argmax(theta))


@settings(max_examples=300, deadline=None)
@given(tree_seed=st.integers(0, 2**31), cost_seed=st.integers(0, 2**31), n_nodes=st.integers(1, 80),
       n_max=st.integers(1, 100), flat=st.sampled_from([0.0, 0.3, 0.9]), jump=st.sampled_from([0.0, 0.0, 0.1, 1.0]),
       group=st.sampled_from([1, 1, 3, 6, 16]), pass_jump=st.sampled_from([0.0, 0.05, 0.3]),
       monotone=st.booleans())
def test_stop_is_bruteforce_argmax_and_theta_unimodal_on_convex_costs(tree_seed, cost_seed, n_nodes, n_max, flat,
                                                                       jump, group, pass_jump, monotone):
    tree = random_tree(tree_seed, n_nodes)
    cost = random_cost(cost_seed, n_max, flat, jump, group, pass_jump, monotone)
    choice = choose_tree_size(tree.log_weights, cost, 512)
    cap = min(len(tree), cost.max_nodes)
    theta = brute_theta(tree.log_weights, cost, 512, cap)
    assert 0 <= choice.n <= cap
    assert_is_argmax(choice, theta)
    # unimodal along best-first order: over all n when C_v is convex from 0, else from n = 1 on; with pass jumps
    # within each pass (θ may rise again after a jump, which is why the rule takes the argmax); a monotone C_v with
    # concave stretches may make θ multimodal anywhere: only the argmax holds there
    th = theta if jump == 0.0 else theta[1:]
    if len(th) and (group == 1 or pass_jump == 0.0) and not monotone:
        peak = int(np.argmax(th))
        assert np.all(np.diff(th[:peak + 1]) >= -REL * th.max())
        assert np.all(np.diff(th[peak:]) <= REL * th.max())
    # the reported prediction is the chosen tree's
    assert choice.phi == pytest.approx(tree.log_weights[:choice.n].exp().sum().item(), rel=1e-9, abs=1e-12)
    assert choice.predicted_ms == pytest.approx(cost.round_ms(choice.n, 512), rel=1e-12)


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**31), cost_seed=st.integers(0, 2**31), n_max=st.integers(1, 100),
       flat=st.sampled_from([0.0, 0.3, 0.9]), jump=st.sampled_from([0.0, 0.1, 1.0]), group=st.sampled_from([1, 6]),
       pass_jump=st.sampled_from([0.0, 0.3]), draft_ms=st.sampled_from([None, 0.0, 3.0]), monotone=st.booleans())
def test_tree_stop_builds_a_prefix_with_the_same_choice(seed, cost_seed, n_max, flat, jump, group, pass_jump,
                                                         draft_ms, monotone):
    g = torch.Generator().manual_seed(seed)
    L, V = int(torch.randint(1, 12, (1,), generator=g)), int(torch.randint(2, 60, (1,), generator=g))
    lp = torch.log_softmax(torch.randn(L, V, generator=g) * float(torch.empty(1).uniform_(0.1, 8.0, generator=g)), -1)
    cost = random_cost(cost_seed, n_max, flat, jump, group, pass_jump, monotone)
    full = build_tree(lp, cost.max_nodes)
    stop = TreeStop(cost, 512, draft_ms=draft_ms)
    cut = build_tree(lp, cost.max_nodes, stop)
    assert len(cut) <= len(full) and torch.equal(cut.tokens, full.prefix(len(cut)).tokens)
    assert torch.equal(cut.parents, full.prefix(len(cut)).parents)
    a = choose_tree_size(full.log_weights, cost, 512, draft_ms=draft_ms)
    b = choose_tree_size(cut.log_weights, cost, 512, draft_ms=draft_ms)
    c = stop.choice()  # what the engine verifies: kept by the stop rule, no second pass
    assert (a.n, a.phi, a.predicted_ms, a.plain_ms) == (b.n, b.phi, b.predicted_ms, b.plain_ms)
    assert (a.n, a.phi, a.predicted_ms, a.plain_ms) == (c.n, c.phi, c.predicted_ms, c.plain_ms)


def test_tree_stop_stops_early_on_weak_drafts():
    cost = CostModel([1], (30.0 + np.arange(65.0))[None], np.zeros(65), [2.0], [0.0])
    lp = torch.log_softmax(torch.zeros(8, 1000), -1)  # uniform: every node δ <= 1e-3, a tree never pays
    assert len(build_tree(lp, 64, TreeStop(cost, 1))) == 1
    sure = torch.log_softmax(torch.eye(8, 1000) * 30, -1)  # a certain 8-token chain: worth growing to its end
    assert len(build_tree(sure, 64, TreeStop(cost, 1))) >= 8


REF = {"ns": [0, 1, 3, 7, 15, 31, 63, 127], "ctxs": [128, 512, 2048],
       "verify_ms": [[31, 35, 49, 58, 64, 82, 123, 190], [35, 40, 56, 67, 74, 92, 138, 209],
                     [47, 60, 77, 93, 105, 131, 194, 307]], "draft_ms": [2.0, 2.5, 4.0], "overhead_ms": 0.5}


@pytest.fixture(scope="module", params=["monotone", "convex"])
def ref_model(request):
    return fit_cost_model({**REF, "verify_fit": request.param})


@settings(max_examples=60, deadline=None)
@given(tree_seed=st.integers(0, 2**31), n_nodes=st.integers(1, 200), ctx=st.integers(1, 8192))
def test_greedy_on_fitted_reference_profile_any_ctx(ref_model, tree_seed, n_nodes, ctx):
    """Between, below and beyond the ctx grid the blended/extrapolated curves keep the greedy stop exact."""
    tree = random_tree(tree_seed, n_nodes)
    choice = choose_tree_size(tree.log_weights, ref_model, ctx)
    assert_is_argmax(choice, brute_theta(tree.log_weights, ref_model, ctx, min(len(tree), ref_model.max_nodes)))


def test_plateau_ties_pick_the_smallest_n():
    # free verification and zero-weight nodes: θ is flat from n = 2 on; the cheapest (first) argmax is chosen
    cost = CostModel([1], np.full((1, 9), 10.0), np.zeros(9), [1.0], [0.0])
    lw = torch.tensor([np.log(0.5), np.log(0.25)] + [-np.inf] * 5, dtype=torch.float64)
    assert choose_tree_size(lw, cost, 1).n == 2


def test_plain_step_beats_a_tree_behind_a_jump():
    # n = 0 costs 10, a tree 20 + 0.1 per node; weak nodes (δ = 0.01): θ_0 = 0.1 > θ_64 = 1.64 / 26.3 = 0.062,
    # yet from n = 1 on every node pays (0.01 > θ_n * 0.1): θ is not unimodal across 0 -> 1
    cost = CostModel([1], np.r_[10.0, 20.0 + 0.1 * np.arange(64)][None], np.zeros(65), [0.0], [0.0])
    lw = torch.log(torch.full((64,), 0.01, dtype=torch.float64))
    assert choose_tree_size(lw, cost, 1).n == 0
    assert choose_tree_size(lw, cost, 1, n_min=1).n == 64
    # worth it once the tree is good enough: δ = 0.9 -> θ_64 = 58.6 / 26.3 > 0.1
    assert choose_tree_size(torch.log(torch.full((64,), 0.9, dtype=torch.float64)), cost, 1).n == 64


def test_limits_n_min_n_max_and_empty():
    cost = CostModel([1], (10.0 + np.arange(65.0) ** 2)[None], np.zeros(65), [1.0], [0.0])
    lw = torch.zeros(300, dtype=torch.float64) - 20.0  # worthless nodes: the optimum is 0 (plain decoding)
    assert choose_tree_size(lw, cost, 100).n == 0
    assert choose_tree_size(lw, cost, 100, n_min=3).n == 3
    free = CostModel([1], np.full((1, 65), 10.0), np.zeros(65), [1.0], [0.0])
    assert choose_tree_size(lw, free, 100).n == 64  # never beyond the profiled range
    assert choose_tree_size(lw, free, 100, n_max=7).n == 7
    assert choose_tree_size(lw[:5], free, 100).n == 5
    empty = choose_tree_size(torch.zeros(0, dtype=torch.float64), cost, 100)
    assert (empty.n, empty.phi, empty.predicted_ms) == (0, 0.0, 11.0)
    assert empty.tokens_per_s == pytest.approx(1000 / 11.0)


def test_choice_is_fast(ref_model):
    lp = torch.log_softmax(torch.randn(16, 1000) * 3, dim=-1)
    lw = build_tree(lp, 256).log_weights
    choose_tree_size(lw, ref_model, 1000)
    times = []
    for _ in range(200):
        t = time.perf_counter()
        choose_tree_size(lw, ref_model, 1000)
        times.append(time.perf_counter() - t)
    assert np.median(times) < 1e-3, np.median(times)


def test_draft_ms_override_equals_a_model_with_that_draft_cost():
    rng = np.random.default_rng(3)
    cv = np.r_[10.0, 12.0 + np.cumsum(np.sort(rng.uniform(0.1, 2.0, 32)))[:32]]
    lw = torch.log(torch.sort(torch.rand(32), descending=True).values)
    a = choose_tree_size(lw, CostModel([1], cv[None], np.zeros(33), [15.0], [1.0]), 1, draft_ms=0.5)
    b = choose_tree_size(lw, CostModel([1], cv[None], np.zeros(33), [0.5], [1.0]), 1)
    assert (a.n, a.phi, a.predicted_ms, a.plain_ms) == (b.n, b.phi, b.predicted_ms, b.plain_ms)
    assert a.plain_ms == pytest.approx(0.5 + 1.0 + cv[0])  # C_d + overhead + C_v(0): θ_0 = 1 / plain_ms


def test_draft_gate_warms_up_skips_losing_bands_and_rechecks_them():
    from caddtree.budget import DraftGate
    gate = DraftGate(bands=(1.05, 1.3), explore_every=4, warmup=2)
    assert [gate.band(t, 1.0) for t in (0.9, 1.0, 1.1, 1.3, 5.0)] == [0, 0, 1, 2, 2]
    for _ in range(2):  # warm-up: stage 2 runs and reports a loss in band 0, a gain in band 2
        assert gate.run_rest(0) and gate.run_rest(2)
        gate.observe(0, theta1=1.0, theta2=0.8)
        gate.observe(2, theta1=1.0, theta2=1.2)
    runs = [gate.run_rest(0) for _ in range(12)]
    assert runs == [False, False, False, True] * 3  # skipped, re-checked every 4th round
    assert all(gate.run_rest(2) for _ in range(5)) and gate.run_rest(1)  # a gaining band and an unseen one run
    for _ in range(30):  # the text changes: stage 2 starts paying in band 0, and the gate follows
        if gate.run_rest(0):
            gate.observe(0, 1.0, 1.5)
    assert gate.gain[0] > 0 and gate.run_rest(0)


def test_draft_gate_weighs_its_first_observations_alike_and_resets():
    from caddtree.budget import DraftGate
    gate = DraftGate(bands=(1.05,), memory=0.9, warmup=3)
    for g in (-1.0, 2.0, 2.0):  # one unlucky first round, then two gains: an EMA started at -1 would still be < 0
        assert gate.run_rest(0)
        gate.observe(0, theta1=1.0, theta2=1.0 + g)
    assert gate.gain[0] == pytest.approx((0.81 * -1.0 + 0.9 * 2.0 + 2.0) / (0.81 + 0.9 + 1.0))
    assert gate.run_rest(0)
    for _ in range(200):  # long run: the mean forgets at rate `memory`, the old weights drop out
        gate.observe(0, 1.0, 0.5)
    assert gate.gain[0] == pytest.approx(-0.5) and not gate.run_rest(0)
    gate.reset()
    assert gate.gain == [0.0, 0.0] and gate.seen == [0, 0] and gate.run_rest(0)


def test_phi_calibration_learns_acceptance_rates_and_keeps_the_order():
    import numpy as np

    from caddtree.budget import PhiCalibration
    cal = PhiCalibration(prior_strength=4.0, memory=1.0)
    lw = np.log([0.95, 0.9, 0.5, 0.3, 0.3, 0.1, 0.01])
    assert np.allclose(cal.apply(lw), lw)  # nothing seen yet: the prior is ratio 1
    for _ in range(200):  # nodes near 0.9 never accepted, nodes near 0.3 always: over- and underconfidence
        cal.observe(np.log([0.92, 0.3]), accepted=[1])
    out = np.exp(cal.apply(lw))
    assert out[0] < 0.05 and out[1] < 0.05  # the 0.9 bin's rate ~ 4 / (4 + 184)
    assert np.all(np.diff(out) <= 0)  # non-increasing along the best-first order: prefixes stay trees
    assert out[2] == out[1]  # the 0.3 bin maps above 1 -> capped, then by the running minimum
    assert np.isclose(out[6], 0.01)  # a bin never seen keeps its prior
    cost = CostModel([128], [[30.0] + [30.0 + 2.0 * n for n in range(1, 9)]], [0.0] * 9, [5.0], [0.0])
    assert choose_tree_size(cal.apply(lw), cost, 128).n < choose_tree_size(lw, cost, 128).n
