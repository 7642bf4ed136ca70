"""CaDDTree's per-round tree size: maximise expected tokens per ms θ_n = (1 + Φ_n) / (C_d + overhead + C_v(n; ℓ)).

Φ_n = Σ_{i<n} δ_i is the expected number of accepted draft tokens of the best-first n-node tree (δ_i = exp of node i's
log prefix weight); the 1 is the bonus token every round yields; C_v(n; ℓ) here is `CostModel.verify_curve`, the
verify with the overhead's per-node part, and "overhead" its fixed part. Going from n to n+1 nodes raises θ iff
δ_{n+1} > θ_n · (C_v(n+1) − C_v(n)). With δ non-increasing (best-first order) and C_v convex non-decreasing in n
(the paper's fit, `verify_fit="convex"`, for n >= 1), once a step fails θ never rises again (θ_{n+1} is a mediant of
θ_n and δ/ΔC, and later ratios δ/ΔC only shrink), so the first failure from n = 1 on is the optimum over n >= 1. The
tree builder stops early on a bound that needs no shape at all (`TreeStop`): nodes past the point where no larger
tree can win are never built.

The cost model's default fit is only monotone (`costmodel`: measured CPU curves are steep for small trees and flatter
for large ones, with a step per kernel pass), and its convex fit with pass jumps (C_v = f + J · ⌊n / g⌋, f convex)
is unimodal only within each pass. So the rule takes the first argmax of θ over all sizes from n = 1 on: under a
convex C_v exactly the first failure, and exact for any C_v; computing θ for every size costs the same numpy ops the
first-failure test needs.

n = 0 (a plain decoding step, lossless) is compared explicitly: the cost model keeps its measured cost, which may sit
well below the masked n = 1 forward, so θ need not be unimodal across the 0 -> 1 step. Where C_v is convex from 0,
this is the plain first-failure rule.

Ties: comparisons are strict, so on a plateau of θ the smallest n (the cheapest round) is chosen, i.e. the first
argmax. Pure numpy on a few hundred floats: tens of microseconds per round.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from caddtree.costmodel import CostModel


@dataclass
class BudgetChoice:
    n: int               # tree nodes to verify (0 = plain decoding step)
    phi: float           # predicted accepted draft tokens Φ_n (the round yields 1 + Φ_n tokens on average)
    predicted_ms: float  # predicted round time: C_d + overhead + C_v(n; ℓ)
    plain_ms: float      # the same for n = 0 (a plain step after this draft): θ_0 = 1 / plain_ms

    @property
    def tokens_per_s(self) -> float:
        return 1000.0 * (1.0 + self.phi) / self.predicted_ms


def _numpy(x) -> np.ndarray:
    """A tensor or array-like -> numpy (the policy is numpy on a few hundred floats)."""
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def _base_ms(cost: CostModel, ctx: int, draft_ms: float | None) -> float:
    """The part of a round's time that does not depend on the tree size: C_d (this round's, if given) + overhead."""
    return (cost.draft_ms(ctx) if draft_ms is None else draft_ms) + cost.overhead_ms(ctx)


def choose_tree_size(log_weights, cost: CostModel, ctx: int, n_min: int = 0, n_max: int | None = None,
                     draft_ms: float | None = None) -> BudgetChoice:
    """log_weights [N] best-first (non-increasing) log prefix weights -> the θ-maximising tree size.

    0 <= n_min <= n <= min(N, cost.max_nodes, n_max). `ctx` is ℓ, the KV-cache length the verify runs on.
    draft_ms: this round's C_d if not the cost model's (e.g. a two-stage drafter's first stage alone).
    """
    lw = _numpy(log_weights)
    cap = min(len(lw), cost.max_nodes, len(lw) if n_max is None else n_max)
    delta = np.exp(lw[:cap].astype(np.float64))
    cv = cost.verify_curve(ctx)[:cap + 1]                    # C_v(0..cap)
    base = _base_ms(cost, ctx, draft_ms)
    phi = np.concatenate(([0.0], np.cumsum(delta)))          # Φ_0..Φ_cap
    theta = (1.0 + phi) / (base + cv)                        # θ_0..θ_cap
    lo = min(max(n_min, 1), cap)                             # from n = 1 (or n_min): the first argmax ...
    n = lo + int(np.argmax(theta[lo:]))
    if n_min == 0 and theta[0] >= theta[n]:                  # ... against the plain step
        n = 0
    return BudgetChoice(n, float(phi[n]), float(base + cv[n]), float(base + cv[0]))


class TreeStop:
    """`build_tree`'s stop for CaDDTree: ends the build once no larger tree can beat the best θ so far, so the tree
    is built only as far as `choose_tree_size` could use it, and keeps that choice (`choice()`: the same as
    `choose_tree_size` on the full build, without a second pass over the weights: a few numpy calls saved per round
    weigh here, where they run cache-cold right after a verify forward).

    After m nodes with Φ_m and last weight δ_m, every later node weighs at most δ_m (best-first order), so
    θ_n <= (1 + Φ_m + (n - m) δ_m) / (C_d + overhead + C_v(n)) for n > m; when that bound is nowhere above the best θ
    of n <= m (θ_0 included), no larger size can be chosen (ties go to the smaller size). Pass the same cost model,
    ctx and draft_ms as `choose_tree_size` would get (and no n_max there).

    calibration (a `PhiCalibration`, optional): each node's δ is priced as `calibration.scale` maps it, capped by the
    previous node's priced δ (the running minimum of `PhiCalibration.apply`), so priced weights stay non-increasing
    and the bound above still holds; Φ and the choice are then the calibrated ones.
    """

    def __init__(self, cost: CostModel, ctx: int, draft_ms: float | None = None,
                 calibration: "PhiCalibration | None" = None):
        self.calibration, self.last = calibration, 1.0  # last: the previous node's priced δ
        self.cap, self.model, self.ctx = cost.max_nodes, cost, ctx
        self.base = _base_ms(cost, ctx, draft_ms)
        self.plain_ms = self.base + cost.plain_verify_ms(ctx)  # = curve[0], without the curve
        self._curve, self._cost = None, None  # made at the first node (`curve`, `cost`)
        self.m, self.phi, self.best = 0, 0.0, 1.0 / self.plain_ms
        self.n, self.phi_n = 0, 0.0  # the first argmax of θ over the sizes seen so far, and its Φ

    @property
    def curve(self) -> np.ndarray:
        """[cap + 1] round ms per tree size: C_d + overhead + C_v(n; ℓ)."""
        if self._curve is None:
            self._curve = self.base + self.model.verify_curve(self.ctx)
        return self._curve

    @property
    def cost(self) -> list[float]:
        """`curve` as floats: the per-node test reads single entries."""
        if self._cost is None:
            self._cost = self.curve.tolist()
        return self._cost

    def __call__(self, log_weight: float) -> bool:
        self.m += 1
        m, d = self.m, float(np.exp(log_weight))  # np.exp, as choose_tree_size: the same Φ to the last bit
        if self.calibration is not None:
            d = self.last = min(self.last, self.calibration.scale(d))
        self.phi += d
        theta = (1.0 + self.phi) / self.cost[m]
        if theta > self.best:  # strict: ties go to the smaller size, θ_0 included (as in `choose_tree_size`)
            self.best, self.n, self.phi_n = theta, m, self.phi
        if m >= self.cap:
            return True
        return not self._may_win(1.0 + self.phi, d, m, m + 1)

    def _may_win(self, a: float, d: float, m: int, first: int) -> bool:
        """Whether some size n in first..cap has (a + (n - m) δ) / cost(n) above the best θ so far: the bound on
        θ_n after m nodes with Φ_m = a - 1 and last weight δ = d (module docstring). A plain loop, not numpy: the
        first size that may win usually comes within a few steps, and numpy's per-call cost weighs here, cache-cold
        right after a verify forward."""
        cost, best = self.cost, self.best
        for n in range(first, self.cap + 1):
            if (a + (n - m) * d) / cost[n] > best:
                return True
        return False

    def choice(self) -> BudgetChoice:
        """The tree size to verify among those built (call after `build_tree` has stopped)."""
        chosen = self.plain_ms if self.n == 0 else float(self.curve[self.n])
        return BudgetChoice(self.n, self.phi_n, chosen, self.plain_ms)

    def plain_only(self, log_weight: float) -> bool:
        """Whether a tree whose best node weighs `log_weight` (its first node: every other weighs at most as much)
        stops at its first node with the plain step chosen, decided before any node is built.

        It does exactly when no size n >= 1 has (1 + δ + (n - 1) δ) / cost(n) above θ_0 = 1 / cost(0) (δ: the node
        priced as `__call__` prices it), the tests `__call__` makes at that node (θ_1, then the bound), in the same
        float64 operations (`_may_win` from n = 1, where the bound is θ_1 itself): True
        exactly where a build with this stop yields the plain step, so the caller may skip the build (~0.1-0.2 ms of
        Python a round, cache-cold after a verify). Mathematically the test is δ <= (C_v(n) - C_v(0)) / (n cost(0))
        for every n; most rounds of sampled text sit far below the least of those slopes, and a lower bound of it
        (`CostModel.row_slope_floor`) answers them without the loop over sizes (half of it: a margin far beyond the
        loop's rounding). Reads no state it changes: call it on a fresh stop, before `build_tree`.
        """
        if self.m:
            raise ValueError("plain_only decides before the first node: call it on a fresh TreeStop")
        d = float(np.exp(log_weight))
        if self.calibration is not None:
            d = min(self.last, self.calibration.scale(d))
        floor = self.model.row_slope_floor(self.ctx)
        if floor > 1e-9 * self.plain_ms and d * self.plain_ms <= 0.5 * floor:
            return True
        return not self._may_win(1.0 + d, d, 1, 1)


class PhiCalibration:
    """The rate at which tree nodes were accepted, as a function of their predicted probability δ, learned while
    decoding; `apply` maps δ to that rate, so Φ = Σ δ counts the tokens the target really accepts.

    The drafters calibrate their marginals position by position, on the top token of a chain; Φ also sums sibling
    branches and products of marginals, which nothing calibrates (with the mix drafter, Φ was 5-14% under the accepted
    tokens on GSM8K and HumanEval). δ is binned (`EDGES`); per bin, ratio = (accepted + a) / (Σ δ + a), with
    `prior_strength` a units of predicted mass at ratio 1, fading by `memory` per node seen in the bin. The map
    δ -> min(1, ratio · δ) is made non-increasing along the best-first order (running minimum), so the calibrated
    weights keep every property the stopping rule needs: a prefix is still a tree, and the first failure is still
    the optimum. Only the tree's size depends on it. Greedily off by default (`Decoder(calibrate_phi=True)`): it
    brought Φ within 4-6% of the accepted tokens but did not change the speed measurably (docs/design.md); on by
    default under sampling (`Decoder(calibrate_phi="sampling")`, docs/sampling.md).

    The bins learn over every text of a setting, and a benchmark's texts alternate between sets whose acceptance
    differs (sampled at T = 0.7, Φ was 38% over the accepted tokens on MT-Bench and 15% under on HumanEval with the
    bins alone); a text ratio on top, (accepted + b) / (calibrated Φ + b) over the current generation's verified
    trees (`start_text` at each generation, b = `text_prior`), takes the rest of the way for the text at hand.
    """

    EDGES = np.array([0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9])

    def __init__(self, prior_strength: float = 4.0, memory: float = 0.995, text_prior: float = 2.0):
        self.prior_strength, self.memory, self.text_prior = prior_strength, memory, text_prior
        self.hits = np.zeros(len(self.EDGES) + 1)
        self.predicted = np.zeros(len(self.EDGES) + 1)
        self._edges = self.EDGES.tolist()
        self.start_text()

    def start_text(self) -> None:
        """A new generation: its own text ratio starts again at 1 (the bins, learned over every text, stay)."""
        self.text_hits, self.text_predicted = 0.0, 0.0

    def text_ratio(self) -> float:
        """Accepted nodes over their calibrated Φ so far in this generation, `text_prior` units of Φ at ratio 1."""
        a = self.text_prior
        return (self.text_hits + a) / (self.text_predicted + a)

    def ratio(self) -> np.ndarray:
        a = self.prior_strength
        return (self.hits + a) / (self.predicted + a)

    def scale(self, delta: float) -> float:
        """One node's δ -> its calibrated δ, min(1, δ · its bin's ratio · the text ratio) (before the running
        minimum)."""
        b = bisect.bisect_left(self._edges, delta)  # = np.searchsorted(EDGES, δ), without numpy's per-call cost
        a = self.prior_strength
        return min(1.0, delta * (self.hits[b] + a) / (self.predicted[b] + a) * self.text_ratio())

    def apply(self, log_weights) -> np.ndarray:
        """[N] best-first log δ -> [N] calibrated log δ, non-increasing."""
        lw = _numpy(log_weights)
        delta = np.exp(lw.astype(np.float64))
        out = np.minimum(1.0, delta * self.ratio()[np.searchsorted(self.EDGES, delta)] * self.text_ratio())
        return np.log(np.minimum.accumulate(out))

    def observe(self, log_weights, accepted) -> None:
        """A verified tree's [n] log δ (uncalibrated) and the node indices of its accepted path."""
        lw = _numpy(log_weights)
        self.text_predicted += float(np.exp(self.apply(lw)).sum())  # as priced, before this tree is learned
        self.text_hits += len(accepted)
        delta = np.exp(lw.astype(np.float64))
        hit = np.zeros(len(lw))
        hit[list(accepted)] = 1.0
        for b, d, h in zip(np.searchsorted(self.EDGES, delta), delta, hit):
            self.hits[b] = self.memory * self.hits[b] + h
            self.predicted[b] = self.memory * self.predicted[b] + d


def faded_mean(mean: float, weight: float, x: float, fade: float) -> tuple[float, float]:
    """One observation x into a running mean whose past counts `fade` times less at each new one: (mean', weight')
    with weight' = fade · weight + 1 and mean' = (fade · weight · mean + x) / weight', so the first observation (weight
    0) sets the mean and fade = 0 replaces it."""
    w = fade * weight
    return (w * mean + x) / (w + 1.0), w + 1.0


class DraftGate:
    """Draft-or-skip for a two-stage drafter: a cheap first proposal q1 (prompt lookup, ~0.4 ms) and a costly one q2
    on top (the trained drafter + lookup, ~15 ms on this project's CPU, paid before any tree is chosen).

    CaDDTree maximises θ = (1 + Φ) / (C_d + C_v) over the tree; this extends the choice to C_d itself. Each round
    θ1, the best θ with q1 alone (C_d = the first stage's), is known before paying for stage 2; θ2 is not. The gate
    keeps, per band of the ratio θ1 / θ0 (θ0: a plain step's θ), the running mean of the gain θ2 - θ1 observed in the
    rounds where it ran stage 2 (each gain weighted by `memory` ** its age, normalised by the weights' sum, so the
    first observations count equally instead of the first one dominating), and runs stage 2 only where that mean is
    positive. The engine feeds it either the realised gain (default: each θ with 1 + the tokens its tree would have
    had accepted, known once the output has passed the round, over the cost model's round time;
    `accept.accepted_along`) or the predicted one (1 + Φ from the calibrated marginals, which inherits their
    miscalibration): e.g. on chat text the trained drafter rarely pays its cost, and where the lookup already has a
    long confident match it adds little. A band that skips keeps being re-checked every `explore_every` rounds, and
    each band runs stage 2 for its first `warmup` rounds, so the gate follows a change of text. Greedily the engine
    starts each generation with a fresh gate: what stage 2 gains depends on the text (on MBPP its mean gain per band
    was positive, on LiveCodeBench negative in every band, docs/design.md), and gains carried over from another
    prompt made a run's speed depend on the prompts decoded before it. Under sampling the engine keeps one gate per
    sampling setting across generations instead (`Decoder(carry_gate="sampling")`, the default), where gains are small
    everywhere and a fresh gate's warm-up cost more than it learned (results/bench-amd512-native3). Only the draft
    changes, never the output.
    """

    def __init__(self, bands=(1.05, 1.3, 1.7), memory: float = 0.9, explore_every: int = 8, warmup: int = 3,
                 backoff: int = 0):
        """backoff > 0: a band's re-check interval doubles after each re-check that leaves its mean gain <= 0, up to
        `backoff` rounds, and falls back to `explore_every` once the gain is positive (the engine sets it under
        sampling, where gains are small and re-checks that do not pay weigh most)."""
        self.bands, self.memory, self.explore_every, self.warmup = tuple(bands), memory, explore_every, warmup
        self.backoff = backoff
        self.reset()

    def reset(self) -> None:
        """Forget every band's observations (a new text)."""
        k = len(self.bands) + 1
        self.gain = [0.0] * k     # running mean of θ2 - θ1 per band (in the unit of the θs given, e.g. tokens per s)
        self.weight = [0.0] * k   # sum of the observations' weights memory ** age (the mean's normaliser)
        self.seen = [0] * k       # rounds per band where stage 2 ran
        self.skipped = [0] * k    # rounds skipped in a row per band
        self.interval = [self.explore_every] * k  # re-check interval per band (grows under `backoff`)
        self.checking = [False] * k  # the band's last run was a re-check

    def band(self, theta1: float, theta0: float) -> int:
        # = np.searchsorted(bands, ratio, side="right"), without numpy's per-call cost (a call every round)
        return bisect.bisect_right(self.bands, theta1 / max(theta0, 1e-12))

    def run_rest(self, band: int) -> bool:
        """Whether to pay for stage 2 this round."""
        learning = self.seen[band] < self.warmup or self.gain[band] > 0.0
        if learning or self.skipped[band] + 1 >= self.interval[band]:
            self.skipped[band], self.checking[band] = 0, not learning
            return True
        self.skipped[band] += 1
        return False

    def observe(self, band: int, theta1: float, theta2: float) -> None:
        """Stage 2 ran: record its gain (realised or predicted) over stage 1 alone."""
        self.gain[band], self.weight[band] = faded_mean(self.gain[band], self.weight[band], theta2 - theta1,
                                                        self.memory)
        self.seen[band] += 1
        if self.backoff:
            if self.gain[band] > 0.0:
                self.interval[band] = self.explore_every
            elif self.checking[band]:
                self.interval[band] = min(2 * self.interval[band], self.backoff)


class SpeculationGate:
    """Draft or decode plainly, decided before any drafting: the draft's own cost counted against a plain step.

    Once a round has drafted, its draft is paid and the tree policy rightly compares trees with a plain step at that
    price; whether drafting pays at all is a question for before it. A plain step yields 1 token in
    θ_plain = 1 / (C_v(0; ℓ) + o_plain); a drafted round is expected to yield 1 + Φ tokens in θ_spec = (1 + Φ) /
    (C_d + C_v(n) + o_spec): Φ of the tree the policy chose (calibrated, `PhiCalibration`, where calibration is
    on), C_d and C_v priced by the cost model, o_spec and o_plain the running means of the measured rest of a
    drafted round (tree build, acceptance, compaction) and of a plain one (the draw, the cache append): the
    profile's overhead is one for every round (less its per-node part), and what differs between the two kinds of
    round is what this gate weighs. A round that drafted and then chose n = 0 counts its draft as a loss. Where the
    round had two drafts (the costly stage ran), θ_spec is the better of the two: whether the costly stage pays is
    `DraftGate`'s question, whether drafting pays at all this one's.

    Why the expected Φ and not the accepted count: under sampling, acceptance is a noisy draw (a round yields 1, 2
    or 4 tokens), and a mean of realised gains over the ~10 rounds this gate remembers wandered below zero on sets
    where drafting paid ~6% on average (GSM8K at T = 0.7), so the gate stopped drafting there; the calibrated Φ is
    that mean, learned over every verified node of the setting.

    The gate keeps the running mean of the relative gain θ_spec / θ_plain - 1 over the rounds that drafted (weights
    `memory` ** age, normalised), and drafts while it is above -margin', for the first `warmup` rounds of a
    generation, and once every `interval` rounds otherwise; the interval starts at `explore_every` and doubles (to
    `max_interval`) after each re-check that leaves the gain below, so where speculation does not pay (chat text
    sampled at T = 1) re-checks cost a few percent at first and less after. A re-check's gain replaces the mean
    instead of joining it: the rounds before the pause describe text `interval` rounds back. The margin leans towards
    drafting: around break-even, drafting keeps the calibrations learning and catches the bursts (a repeated passage)
    where it pays most. Those bursts are rounds that verify a tree; where the drafts almost never yield one (chat
    text sampled at T = 1: a tree in 5-8% of drafted rounds, each other drafted round a pure loss of the lookup's
    ~0.3 ms and of a verify a few percent slower after it), there is nothing to catch, so the margin shrinks with
    the share r of drafted rounds that verified a tree: margin' = `margin` · min(1, r / `tree_rate`) (r: a running
    mean over the generation's drafted rounds with the gain's weights, starting from `tree_prior` rounds at r =
    `tree_rate`, never replaced by a re-check; `tree_rate` 0: the flat margin, `caddtree@flatmargin`). Per set r was
    0.49-0.85 greedily and 0.20-0.51 at T = 0.7 (results/bench-amd512-onepass), where the margin stays (nearly)
    whole. Only which rounds draft changes, never the output.

    Measured (docs/sampling.md): on by default. Without the margin (realised gains, then expected ones) it drafted
    in 4-28% of rounds on sets where drafting every round was as fast or faster: there the expected gain of a round
    sits within a few percent of zero, and once below, the gate stops collecting the rounds that would lift it. At
    margin 0 with the re-check rule (results/bench-amd512-stepcut): 4% more time pooled at T = 0.7 (it pauses through
    stretches of long answers where drafting pays). With the margin (results/bench-amd512-specgate at 957a326, 8
    sets x 12): 0.995, 0.996 and 1.008 of CaDDTree's time per prompt greedy, at T = 1.0 and at T = 0.7; where
    drafting never pays (a weak drafter on a tiny target) CaDDTree kept 0.77-0.81x plain decoding's speed with it,
    0.28x without. The margin by tree share against the flat one (results/bench-amd512-treemargin): 0.990 of its time
    per prompt at T = 1.0 (drafting in 16-56% of rounds instead of 74-98%), 1.003 at T = 0.7.
    `Decoder(speculation_gate=False)` or `caddtree@nospec` in `caddtree bench` turns it off.
    """

    MARGIN = 0.05  # the default margin (docstring)
    TREE_RATE = 0.2  # the share of drafted rounds verifying a tree from which the margin is whole (docstring)

    def __init__(self, memory: float = 0.95, warmup: int = 4, explore_every: int = 8, max_interval: int = 32,
                 margin: float = MARGIN, tree_rate: float = TREE_RATE, tree_prior: float = 4.0):
        self.memory, self.warmup, self.explore_every, self.max_interval = memory, warmup, explore_every, max_interval
        self.margin, self.tree_rate, self.tree_prior = margin, tree_rate, tree_prior
        self.overhead = {True: 0.0, False: 0.0}  # drafted -> running mean of the measured rest of a round, ms
        self.measured = {True: 0, False: 0}      # rounds measured of each kind
        self.reset()

    def reset(self) -> None:
        """A new text: forget the observed gains (the overheads, the machine's, are kept)."""
        self.gain, self.weight, self.seen, self.skipped = 0.0, 0.0, 0, 0
        # running mean of "verified a tree" over drafted rounds and its weights' sum, from `tree_prior` rounds at the
        # share where the margin is whole (they fade as observed rounds do): a text's first few drafted rounds
        # without a tree do not take the margin away before anything is known
        self.trees, self.tree_weight = self.tree_rate, self.tree_prior
        self.interval, self.checking = self.explore_every, False

    def current_margin(self) -> float:
        """margin' = margin · min(1, share of drafted rounds that verified a tree / tree_rate)."""
        if not self.tree_rate:
            return self.margin
        return self.margin * min(1.0, self.trees / self.tree_rate)

    def draft(self) -> bool:
        """Whether to draft this round."""
        if self.seen < self.warmup or self.gain > -self.current_margin():
            self.checking = False
            return True
        self.skipped += 1
        if self.skipped >= self.interval:
            self.skipped, self.checking = 0, True
            return True
        return False

    def measure(self, drafted: bool, ms: float) -> None:
        """A round's measured time outside its draft and verify forward (the first value, then a mean that fades
        by `memory` per round)."""
        k = self.measured[drafted] = self.measured[drafted] + 1
        w = 1.0 if k == 1 else 1.0 - self.memory
        self.overhead[drafted] += w * (ms - self.overhead[drafted])

    def observe(self, tokens_ms: list[tuple[float, float]], plain_ms: float, tree: bool = True) -> None:
        """A drafted round: (1 + Φ, C_d + C_v(n)) for each draft the round priced (the first stage's, and both
        stages' where the costly one ran); plain_ms = C_v(0; ℓ); tree: whether the round verified a tree (n > 0)."""
        self.trees, self.tree_weight = faded_mean(self.trees, self.tree_weight, float(tree), self.memory)
        spec = max(t / (ms + self.overhead[True]) for t, ms in tokens_ms)
        plain = 1.0 / (plain_ms + self.overhead[False])
        # a re-check is a fresh look at the text: its gain replaces the mean, which describes rounds `interval` or
        # more rounds back (kept, one re-check that paid barely moved a mean of ~20 losses, and drafting stayed off
        # through stretches where it paid)
        self.gain, self.weight = faded_mean(self.gain, self.weight, spec / plain - 1.0,
                                            0.0 if self.checking else self.memory)
        self.seen += 1
        if self.gain > -self.current_margin():
            self.interval = self.explore_every
        elif self.checking:
            self.interval = min(2 * self.interval, self.max_interval)
