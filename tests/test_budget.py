"""CaDDTree stop rule: the greedy first-failure stop is the brute-force argmax of θ over n, and θ is unimodal; the
tree builder's stop (`TreeStop`) and `choose_tree_size` agree, ties included.

Speed of the policy is a benchmark, not a test: scripts/bench_policy_cost.py."""
import copy
from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings, strategies as st

from caddtree.budget import BudgetChoice, TreeStop, choose_tree_size
from caddtree.costmodel import CostModel, fit_cost_model
from caddtree.tree import build_tree

REL = 1e-9  # float round-off on θ comparisons (the unimodality check)


def random_tree(seed: int, n_nodes: int):
    g = torch.Generator().manual_seed(seed)
    L = int(torch.randint(1, 9, (1,), generator=g))
    V = int(torch.randint(2, 40, (1,), generator=g))
    scale = float(torch.empty(1).uniform_(0.1, 8.0, generator=g))  # flat .. peaky marginals
    lp = torch.log_softmax(torch.randn(L, V, generator=g) * scale, dim=-1)
    return build_tree(lp, n_nodes)


def without_negligible_nodes(tree, floor: float = 1e-9):
    """The tree with every δ below `floor` set to exactly 0 (log weight -inf). A δ of, say, 1e-40 on a flat stretch
    of C_v raises θ by a relative 1e-40: the exact argmax is the larger n, the float one the smaller (1 + Φ does not
    move), and either answer is right to float precision. Zeros make such plateaus exact ties, which the policy must
    break towards the smaller n (a larger floor: more of them); the smallest gap left between θs is ~1e-11, far
    above float round-off."""
    lw = tree.log_weights.clone()
    lw[lw < np.log(floor)] = -np.inf
    return type(tree)(tree.tokens, tree.parents, tree.depths, lw)


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


def exact_theta(log_weights, cost: CostModel, ctx: int, cap: int, draft_ms: float | None = None):
    """θ_n = (1 + Φ_n) / (C_d + overhead + C_v(n; ℓ)) for n = 0..cap in exact rational arithmetic on the policy's
    inputs (δ_i = exp of the float64 log weight, the cost model's ms): no float summation order to agree on."""
    d = [Fraction(float(np.exp(w))) for w in np.asarray(log_weights, dtype=np.float64)[:cap]]
    base = Fraction(cost.draft_ms(ctx) if draft_ms is None else draft_ms) + Fraction(cost.overhead_ms(ctx))
    theta, phi = [], Fraction(0)
    for n in range(cap + 1):
        if n:
            phi += d[n - 1]
        theta.append((1 + phi) / (base + Fraction(float(cost.verify_ms(n, ctx)))))
    return theta


def first_argmax(theta) -> int:
    """The smallest n with θ_n = max θ (the policy's tie rule: the cheapest round)."""
    best = max(theta)
    return next(n for n, t in enumerate(theta) if t == best)


def float_ambiguous(theta, gap: float = 1e-12) -> bool:
    """Whether another size's θ comes within float round-off of the best without being exactly equal to it: which of
    the two a float64 implementation picks is then decided by rounding, not by the definition."""
    best = max(theta)
    return any(t != best and abs(t - best) <= gap * best for t in theta)


def assert_is_argmax(choice: BudgetChoice, log_weights, cost: CostModel, ctx: int, cap: int):
    """The chosen size is exactly the first argmax of θ, computed here from the definition (inputs whose optimum a
    float implementation may legitimately miss by rounding are discarded, not accepted with a window)."""
    theta = exact_theta(log_weights, cost, ctx, cap)
    assume(not float_ambiguous(theta))
    assert choice.n == first_argmax(theta), (choice.n, [float(t) for t in theta])


@settings(max_examples=300, deadline=None)
@given(tree_seed=st.integers(0, 2**31), cost_seed=st.integers(0, 2**31), n_nodes=st.integers(1, 80),
       n_max=st.integers(1, 100), flat=st.sampled_from([0.0, 0.3, 0.9]), jump=st.sampled_from([0.0, 0.0, 0.1, 1.0]),
       group=st.sampled_from([1, 1, 3, 6, 16]), pass_jump=st.sampled_from([0.0, 0.05, 0.3]),
       monotone=st.booleans(), floor=st.sampled_from([1e-9, 1e-9, 1e-3, 0.05]))
def test_stop_is_bruteforce_argmax_and_theta_unimodal_on_convex_costs(tree_seed, cost_seed, n_nodes, n_max, flat,
                                                                       jump, group, pass_jump, monotone, floor):
    tree = without_negligible_nodes(random_tree(tree_seed, n_nodes), floor)
    cost = random_cost(cost_seed, n_max, flat, jump, group, pass_jump, monotone)
    choice = choose_tree_size(tree.log_weights, cost, 512)
    cap = min(len(tree), cost.max_nodes)
    theta = brute_theta(tree.log_weights, cost, 512, cap)
    assert 0 <= choice.n <= cap
    assert_is_argmax(choice, tree.log_weights, cost, 512, cap)
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
@given(tree_seed=st.integers(0, 2**31), n_nodes=st.integers(1, 200), ctx=st.integers(1, 8192),
       floor=st.sampled_from([1e-9, 1e-2]))
def test_greedy_on_fitted_reference_profile_any_ctx(ref_model, tree_seed, n_nodes, ctx, floor):
    """Between, below and beyond the ctx grid the blended/extrapolated curves keep the greedy stop exact."""
    tree = without_negligible_nodes(random_tree(tree_seed, n_nodes), floor)
    choice = choose_tree_size(tree.log_weights, ref_model, ctx)
    assert_is_argmax(choice, tree.log_weights, ref_model, ctx, min(len(tree), ref_model.max_nodes))


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
    cal.start_text()  # the bins alone (a new generation's text ratio is 1)
    out = np.exp(cal.apply(lw))
    assert out[0] < 0.05 and out[1] < 0.05  # the 0.9 bin's rate ~ 4 / (4 + 184)
    assert np.all(np.diff(out) <= 0)  # non-increasing along the best-first order: prefixes stay trees
    assert out[2] == out[1]  # the 0.3 bin maps above 1 -> capped, then by the running minimum
    assert np.isclose(out[6], 0.01)  # a bin never seen keeps its prior
    cost = CostModel([128], [[30.0] + [30.0 + 2.0 * n for n in range(1, 9)]], [0.0] * 9, [5.0], [0.0])
    assert choose_tree_size(cal.apply(lw), cost, 128).n < choose_tree_size(lw, cost, 128).n


# ------------------------------------------------------------------------------------------------------------- ties
# δs whose float64 log round-trips exactly through np.exp (what both rules compute), and costs in halves: every θ, and
# every bound TreeStop compares, is exact in float64, so ties are true ties and the tie rule alone decides.
DYADIC = [1.0, 0.5, 0.25, 1 / 16, 1 / 32, 0.0]
assert all(d == 0.0 or float(np.exp(np.log(d))) == d for d in DYADIC)


def log_weights(deltas) -> torch.Tensor:
    with np.errstate(divide="ignore"):
        return torch.tensor(np.log(np.asarray(deltas, dtype=np.float64)), dtype=torch.float64)


def cost_of(round_ms, draft_ms: float = 0.0, overhead_ms: float = 0.0, group: int = 1,
            pass_ms: float = 0.0, node_ms: float = 0.0) -> CostModel:
    """A one-ctx cost model whose C_v(n) (before pass jumps and the overhead's per-node part node_ms · n) is
    round_ms[n] - draft_ms - overhead_ms."""
    cv = np.asarray(round_ms, dtype=np.float64) - draft_ms - overhead_ms
    return CostModel([1], cv[None], np.zeros(len(cv)), [draft_ms], [overhead_ms], row_group=group,
                     pass_ms=[pass_ms], verify_fit="monotone", overhead_node=node_ms)


def stop_build(lw, cost: CostModel, ctx: int = 1, draft_ms=None):
    """Feed the log weights to TreeStop one node at a time, as `build_tree` does -> (nodes built, its choice)."""
    stop = TreeStop(cost, ctx, draft_ms=draft_ms)
    built = 0
    for w in lw.tolist():
        built += 1
        if stop(w):
            break
    return built, stop.choice()


def exact_stop_point(theta, deltas, round_ms, cap: int) -> int:
    """Nodes TreeStop's documented bound builds: the first m where no n > m has (1 + Φ_m + (n - m) δ_m) / cost(n)
    above the best θ of sizes 0..m (ties go to the smaller size, so a bound equal to it stops), or all of them."""
    d = [Fraction(x) for x in deltas[:cap]]
    for m in range(1, cap + 1):
        if m == cap:
            return m
        best, a = max(theta[:m + 1]), 1 + sum(d[:m])
        if all((a + (n - m) * d[m - 1]) / Fraction(round_ms[n]) <= best for n in range(m + 1, cap + 1)):
            return m
    return cap


def check_tie_case(deltas, cost: CostModel, draft_ms=None):
    """TreeStop and choose_tree_size pick the same, exact first argmax, with the same Φ and round time; TreeStop
    stops exactly where its bound says. -> (the chosen n, whether θ had a tie at the top)."""
    lw = log_weights(deltas)
    cap = min(len(deltas), cost.max_nodes)
    theta = exact_theta(lw, cost, 1, cap, draft_ms)
    assert not float_ambiguous(theta)  # the construction: exact values, so only exact ties
    want = first_argmax(theta)
    a = choose_tree_size(lw, cost, 1, draft_ms=draft_ms)
    built, b = stop_build(lw, cost, draft_ms=draft_ms)
    assert a.n == b.n == want, (a.n, b.n, want, [str(t) for t in theta])
    assert (a.phi, a.predicted_ms, a.plain_ms) == (b.phi, b.predicted_ms, b.plain_ms)
    assert a.phi == float(sum(Fraction(d) for d in deltas[:want]))
    round_ms = [float(x) for x in (cost.draft_ms(1) if draft_ms is None else draft_ms) + cost.overhead_ms(1)
                + cost.verify_curve(1)]
    assert built == exact_stop_point(theta, deltas, round_ms, cap), (built, [str(t) for t in theta])
    return want, sum(t == max(theta) for t in theta) > 1


@pytest.mark.parametrize("deltas, round_ms, want", [
    # equal δs, cost +1 a node from a plain step of 2: θ = 0.5 at every size -> the plain step
    ([0.5] * 8, [2, 3, 4, 5, 6, 7, 8, 9, 10], 0),
    # a flat cost segment (0..2), then +1 a node with δ = 0.5: θ climbs to 0.5 at n = 2 and stays -> 2
    ([0.5] * 8, [4, 4, 4, 5, 6, 7, 8, 9, 10], 2),
    # zero-weight nodes on a flat segment: θ plateaus from n = 2 -> 2
    ([0.5, 0.25, 0, 0, 0, 0], [10, 10, 10, 10, 10, 10, 10], 2),
    # the plain step ties the best tree (θ_0 = θ_1 = 1), larger trees lose -> the plain step
    ([1.0, 0.5, 0.25], [1, 2, 3.5, 5], 0),
    # the plain step ties trees that a cost jump delays (θ_0 = θ_2 = θ_3 = 0.5, θ_1 below) -> the plain step
    ([0.5, 0.5, 0.5], [2, 3.5, 4, 5], 0),
    # θ peaks at n = 2 (0.5), falls behind a step, climbs back to exactly 0.5 at n = 6, then falls -> 2
    ([0.5] * 9, [3, 3.5, 4, 6.5, 7, 7.5, 8, 12, 13, 14], 2),
    # θ_1 = θ_2 = 1, and after n = 1 the bound (2 + (n - 1) δ_1) / cost(n) equals θ_1 for every larger n: the build
    # stops right there -> 1
    ([1.0, 1.0, 0.25, 0.25], [2, 2, 3, 4, 5], 1),
])
def test_tree_stop_and_choose_tree_size_agree_on_constructed_ties(deltas, round_ms, want):
    n, tied = check_tie_case(deltas, cost_of(round_ms))
    if want is not None:
        assert n == want
    assert tied  # each case is a tie at the top


def test_tree_stop_and_choose_tree_size_agree_on_random_ties():
    """Dyadic δs, costs in halves with flat segments (as the monotone fit makes them), pass jumps, a per-node
    overhead and a draft cost override: many exact ties at the top, and both rules pick the same, smallest optimum."""
    rng = np.random.default_rng(33)
    ties = 0
    for _ in range(1000):
        cap = int(rng.integers(1, 20))
        deltas = sorted(rng.choice(DYADIC, cap, p=[0.2, 0.3, 0.2, 0.1, 0.1, 0.1]), reverse=True)
        steps = rng.choice([0.0, 0.0, 0.0, 0.5, 1.0, 2.0], cap)
        c0 = float(rng.integers(1, 12)) / 2
        round_ms = c0 + np.r_[0.0, rng.choice([0.0, 0.5, 1.0, 3.0]) + np.cumsum(steps)]
        draft, over = float(rng.integers(0, 3)) / 2, float(rng.integers(0, 2)) / 2
        group, jump = (1, 0.0) if rng.random() < 0.6 else (int(rng.integers(2, 5)), float(rng.integers(1, 4)) / 2)
        node = float(rng.choice([0.0, 0.0, 0.25, 0.5]))
        cost = cost_of(round_ms + draft + over, draft, over, group, jump, node)
        draft_ms = None if rng.random() < 0.7 else float(rng.integers(0, 4)) / 2
        _, tied = check_tie_case(deltas, cost, draft_ms)
        ties += tied
    assert ties >= 50, ties  # the construction does produce ties (67 of these 1000 cases)


@pytest.mark.parametrize("seed", range(30))
def test_tree_stop_with_a_calibration_chooses_as_choose_tree_size_on_the_calibrated_weights(seed):
    """TreeStop prices each node through `PhiCalibration.scale` with the running minimum, node by node as the tree is
    built: the same choice (size and Φ) as `choose_tree_size` on `PhiCalibration.apply` of the whole tree."""
    from caddtree.budget import PhiCalibration
    rng = np.random.default_rng(seed)
    cal = PhiCalibration(prior_strength=2.0, memory=1.0)
    for _ in range(300):  # random acceptance rates per bin: over- and underconfident bins
        lw = np.sort(np.log(rng.uniform(0.01, 1.0, 6)))[::-1]
        cal.observe(lw, [i for i in range(6) if rng.random() < rng.uniform(0, 1) * np.exp(lw[i])])
    tree = random_tree(seed, 48)
    cost = random_cost(seed, 64, flat_frac=0.3)
    stop = TreeStop(cost, 512, calibration=cal)
    built = 0
    for w in tree.log_weights.tolist():
        built += 1
        if stop(w):
            break
    want = choose_tree_size(cal.apply(tree.log_weights), cost, 512)
    got = stop.choice()
    assert got.n == want.n and got.phi == pytest.approx(want.phi, rel=1e-12) and built <= len(tree)


def test_phi_calibration_text_ratio_follows_the_current_generation():
    """Bins learned on a text where nodes of δ 0.5 were accepted half the time; the next text accepts a quarter of
    them: within it the priced δ falls towards the new rate (the text ratio), and the next generation starts at 1."""
    from caddtree.budget import PhiCalibration
    cal = PhiCalibration(prior_strength=4.0, memory=1.0, text_prior=2.0)
    for i in range(400):
        cal.observe(np.log([0.5]), accepted=[0] if i % 2 else [])
    cal.start_text()
    assert cal.text_ratio() == 1.0 and float(np.exp(cal.apply(np.log([0.5])))[0]) == pytest.approx(0.5, rel=0.02)
    for i in range(200):
        cal.observe(np.log([0.5]), accepted=[0] if i % 4 == 0 else [])
    assert cal.text_ratio() < 0.8 and cal.scale(0.5) < 0.33  # most of the way from 0.5 to 0.25 (bins learn too)
    cal.start_text()
    assert cal.text_ratio() == 1.0


def test_speculation_gate_stops_drafting_where_it_does_not_pay_and_rechecks_less_and_less():
    from caddtree.budget import SpeculationGate
    gate = SpeculationGate(warmup=3, explore_every=4, max_interval=16, margin=0.05)
    for _ in range(3):  # warm-up: drafts, and each drafted round was worse than a plain step
        assert gate.draft()
        gate.observe([(1, 1.25)], plain_ms=1.0)  # 0.8 tokens per ms against 1
    checks = []
    for i in range(4 + 8 + 16 + 16):
        if gate.draft():
            checks.append(i)
            gate.observe([(1, 1.25)], 1.0)  # each re-check loses again: the interval doubles, 8, 16, then stays at 16
    assert checks == [3, 11, 27, 43] and gate.interval == 16
    gate.reset()
    assert gate.draft() and gate.interval == 4


def test_speculation_gate_margin_decides_a_small_steady_loss():
    """Drafts that cost 3% of a step and never yield (gain -3% every round, sampled chat text with prompt lookup):
    the default margin (5%) keeps drafting every round; margin 0 (`caddtree@spec0`) drafts only its re-checks."""
    from caddtree.budget import SpeculationGate
    for margin in (SpeculationGate.MARGIN, 0.0):
        gate = SpeculationGate(warmup=2, explore_every=8, max_interval=32, margin=margin)
        drafted = 0
        for _ in range(2 + 100):
            if gate.draft():
                drafted += 1
                gate.observe([(1.0, 1.03)], 1.0)
        after_warmup = drafted - 2
        assert after_warmup == 100 if margin else after_warmup <= 100 // 8  # re-checks every 8, 16, 32 rounds


@pytest.mark.parametrize("every", [1, 2, 3, 10, 20, 0])
def test_speculation_gate_margin_shrinks_where_drafts_rarely_verify_a_tree(every):
    """The same steady 3% loss, where one drafted round in `every` verified a tree (0: none ever did): the margin is
    5% · min(1, share / 0.2), so the gate keeps drafting where trees come in a third of the drafted rounds or more
    (the margin stays whole) and stops, drafting only its re-checks, where they come in 1 of 10, 1 of 20 or never
    (margin < 3%)."""
    from caddtree.budget import SpeculationGate
    gate = SpeculationGate(warmup=2, explore_every=8, max_interval=32)
    assert gate.margin == 0.05 and gate.tree_rate == 0.2
    drafted = 0
    for _ in range(2 + 200):
        if gate.draft():
            drafted += 1
            gate.observe([(1.0, 1.03)], 1.0, tree=bool(every) and drafted % every == 0)
    if every and every <= 3:
        assert gate.current_margin() == 0.05 and drafted - 2 == 200
    else:
        assert gate.current_margin() < 0.029 and drafted - 2 <= 200 // 8  # re-checks every 8, 16, 32 rounds
    flat = SpeculationGate(warmup=2, tree_rate=0.0)  # caddtree@flatmargin: the margin whatever the share
    for _ in range(50):
        flat.observe([(1.0, 1.03)], 1.0, tree=False)
    assert flat.current_margin() == 0.05 and flat.draft()


def test_speculation_gate_follows_a_text_where_speculation_starts_paying():
    from caddtree.budget import SpeculationGate
    gate = SpeculationGate(warmup=2, explore_every=4, max_interval=64, margin=0.05)
    for _ in range(2):
        gate.draft()
        gate.observe([(1, 2.0)], 1.0)
    drafted = 0
    for _ in range(200):  # the text turns repetitive: every drafted round now yields 3x a plain step's rate
        if gate.draft():
            drafted += 1
            gate.observe([(3, 1.0)], 1.0)
    assert gate.gain > 0 and gate.interval == 4 and drafted > 190


def test_speculation_gate_resumes_at_the_first_recheck_that_pays():
    """Thirty drafted rounds that lost 10% each, then the text turns: the first re-check that gains 10% resumes
    drafting at once (its gain replaces the mean of the losses; joined to it, the mean would stay below -5% for
    many more re-checks, each up to `max_interval` rounds apart), and a re-check that loses again pauses it again."""
    from caddtree.budget import SpeculationGate
    gate = SpeculationGate(memory=0.95, warmup=30, explore_every=8, max_interval=32, margin=0.05)
    for _ in range(30):
        assert gate.draft()
        gate.observe([(1.0, 1.1)], 1.0)  # 1 / 1.1 of a plain step's rate: -9%
    skipped = 0
    while not gate.draft():
        skipped += 1
    assert skipped == 7 and gate.checking
    gate.observe([(1.1, 1.0)], 1.0)  # +10%
    assert gate.gain == pytest.approx(0.1) and gate.draft() and gate.interval == 8
    gate.observe([(1.1, 1.0)], 1.0)
    losses = 0
    while gate.draft():  # losses again (-20%): the mean of drafted rounds, not a re-check, falls below the margin
        gate.observe([(1.0, 1.25)], 1.0)
        losses += 1
    assert losses == 2 and gate.gain < -0.05


def test_speculation_gate_prices_each_kind_of_round_with_its_measured_overhead():
    """A drafted round of 2 tokens for C_d + C_v = 10 ms against a plain step of C_v(0) = 8 ms: a gain on the
    forwards alone, a loss once the drafted rounds' measured 3 ms more of tree build and compaction count (plain
    rounds: 0.5 ms). The better of two drafts counts (the costly stage's question is the draft gate's)."""
    from caddtree.budget import SpeculationGate
    gate = SpeculationGate(memory=0.5)
    gate.observe([(2, 10.0)], plain_ms=8.0)
    assert gate.gain == pytest.approx((2 / 10) / (1 / 8) - 1)
    gate.reset()
    for ms in (5.0, 3.0):
        gate.measure(True, ms)
    gate.measure(False, 0.5)
    assert gate.overhead == {True: pytest.approx(4.0), False: 0.5}  # first value, then a mean fading by 0.5
    gate.observe([(2, 10.0)], plain_ms=8.0)
    assert gate.gain == pytest.approx((2 / 14) / (1 / 8.5) - 1) and gate.gain > 0
    gate.reset()
    gate.measure(True, 10.0), gate.measure(True, 10.0)
    gate.observe([(2, 10.0)], plain_ms=8.0)
    assert gate.gain < 0
    gate.reset()
    gate.observe([(2, 10.0), (4, 12.0)], plain_ms=8.0)  # the costly stage's tree: 4 tokens
    assert gate.gain == pytest.approx((4 / (12 + gate.overhead[True])) * (8 + gate.overhead[False]) - 1)


def test_draft_gate_backs_off_rechecking_a_losing_band_only_when_asked():
    from caddtree.budget import DraftGate
    for backoff, want in ((0, [3, 7, 11, 15, 19, 23, 27, 31]), (16, [3, 11, 27])):
        gate = DraftGate(bands=(1.05,), explore_every=4, warmup=1, backoff=backoff)
        assert gate.run_rest(0)
        gate.observe(0, theta1=1.0, theta2=0.5)
        runs = []
        for i in range(32):
            if gate.run_rest(0):
                runs.append(i)
                gate.observe(0, 1.0, 0.5)
        assert runs == want, (backoff, runs)


def plain_after_first_node(cost: CostModel, ctx: int, w: float, calibration=None) -> bool:
    """What `build_tree` with a TreeStop does with a first node of log weight w: stop there with the plain step."""
    stop = TreeStop(cost, ctx, calibration=calibration)
    return stop(w) and stop.choice().n == 0


@pytest.mark.parametrize("seed", range(40))
def test_plain_only_answers_as_the_build_would_after_its_first_node(seed):
    """`TreeStop.plain_only(w)` is True exactly where a build whose first node weighs w stops at that node with the
    plain step chosen (the engine then skips the build): random cost curves, weights across the break-even point,
    with and without a calibration; on the dyadic tie cases below, exactly at the break-even as well."""
    from caddtree.budget import PhiCalibration
    rng = np.random.default_rng(seed)
    steps = rng.uniform(0.05, 3.0, 64) * (rng.random(64) < 0.8)  # C_v rising by 0-3 ms a node, flat in places
    steps[0] = rng.uniform(0.5, 3.0)  # but a row's first: C_v(1) = C_v(0) would make any tree beat the plain step
    cost = cost_of(rng.uniform(5.0, 10.0) + np.concatenate([[0.0], np.cumsum(steps)]))
    cal = None
    if seed % 2:
        cal = PhiCalibration(prior_strength=2.0, memory=1.0)
        for _ in range(200):
            lw = np.sort(np.log(rng.uniform(0.01, 1.0, 6)))[::-1]
            cal.observe(lw, [i for i in range(6) if rng.random() < rng.uniform(0, 1) * np.exp(lw[i])])
    looped = copy.copy(cost)
    looped.row_slope_floor = lambda ctx: 0.0  # no shortcut: the loop over sizes decides every weight
    seen, shortcut = set(), 0
    for w in np.log(np.concatenate([rng.uniform(0.0, 1.0, 200), np.geomspace(1e-6, 1.0, 100)])).tolist():
        got = TreeStop(cost, 1, calibration=cal).plain_only(w)
        assert got == plain_after_first_node(cost, 1, w, cal) == TreeStop(looped, 1, calibration=cal).plain_only(w)
        seen.add(got)
        stop = TreeStop(cost, 1, calibration=cal)
        shortcut += stop.plain_only(w) and stop._cost is None  # answered without the curve
    assert seen == {True, False}  # both answers occur: the weights straddle the break-even
    assert shortcut > 0
    stop = TreeStop(cost, 1)
    stop(0.0)
    with pytest.raises(ValueError):  # decided before the first node only
        stop.plain_only(0.0)


@pytest.mark.parametrize("d, round_ms", [
    (0.5, [2, 3, 4, 5, 6]),          # θ_1 = 1.5 / 3 = θ_0 = 1 / 2: a tie, the plain step
    (0.5, [2, 2.5, 4, 5, 6]),        # θ_1 = 0.6 > 0.5: a tree
    (0.25, [2, 3, 3.5, 3.5, 3.5]),   # θ_1 < θ_0 but (1 + 4 δ) / 3.5 = 0.571 > 0.5: the build goes on
    (1 / 16, [2, 3, 4, 4.25, 4.5]),  # (1 + 4 / 16) / 4.5 = 0.2777 ... < 0.5 everywhere: plain
])
def test_plain_only_at_exact_ties(d, round_ms):
    cost = cost_of(round_ms)
    w = float(np.log(d))
    assert TreeStop(cost, 1).plain_only(w) == plain_after_first_node(cost, 1, w)
