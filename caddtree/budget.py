"""CaDDTree's per-round tree size: maximise expected tokens per ms θ_n = (1 + Φ_n) / (C_d + overhead + C_v(n; ℓ)).

Φ_n = Σ_{i<n} δ_i is the expected number of accepted draft tokens of the best-first n-node tree (δ_i = exp of node i's
log prefix weight); the 1 is the bonus token every round yields. Going from n to n+1 nodes raises θ iff
δ_{n+1} > θ_n · (C_v(n+1) − C_v(n)). With δ non-increasing (best-first order) and C_v convex non-decreasing in n
(guaranteed by the cost fit for n >= 1), once a step fails θ never rises again (θ_{n+1} is a mediant of θ_n and δ/ΔC,
and later ratios δ/ΔC only shrink), so the first failure from n = 1 on is the optimum over n >= 1.

n = 0 (a plain decoding step, lossless) is compared explicitly: the cost model keeps its measured cost, which may sit
well below the masked n = 1 forward, so θ need not be unimodal across the 0 -> 1 step. Where C_v is convex from 0,
this is the plain first-failure rule.

Ties: comparisons are strict, so on a plateau of θ the smallest n (the cheapest round) is chosen, i.e. the first
argmax. Pure numpy on a few hundred floats: tens of microseconds per round.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from caddtree.costmodel import CostModel


@dataclass
class BudgetChoice:
    n: int               # tree nodes to verify (0 = plain decoding step)
    phi: float           # predicted accepted draft tokens Φ_n (the round yields 1 + Φ_n tokens on average)
    predicted_ms: float  # predicted round time: C_d + overhead + C_v(n; ℓ)

    @property
    def tokens_per_s(self) -> float:
        return 1000.0 * (1.0 + self.phi) / self.predicted_ms


def choose_tree_size(log_weights, cost: CostModel, ctx: int, n_min: int = 0, n_max: int | None = None
                     ) -> BudgetChoice:
    """log_weights [N] best-first (non-increasing) log prefix weights -> the θ-maximising tree size.

    0 <= n_min <= n <= min(N, cost.max_nodes, n_max). `ctx` is ℓ, the KV-cache length the verify runs on.
    """
    lw = log_weights.detach().cpu().numpy() if hasattr(log_weights, "detach") else np.asarray(log_weights)
    cap = min(len(lw), cost.max_nodes, len(lw) if n_max is None else n_max)
    delta = np.exp(lw[:cap].astype(np.float64))
    cv = cost.verify_curve(ctx)[:cap + 1]                    # C_v(0..cap)
    base = cost.draft_ms(ctx) + cost.overhead_ms(ctx)
    phi = np.concatenate(([0.0], np.cumsum(delta)))          # Φ_0..Φ_cap
    theta = (1.0 + phi) / (base + cv)                        # θ_0..θ_cap
    grow = delta > theta[:-1] * np.diff(cv)                  # step n -> n+1 pays off
    grow[:min(max(n_min, 1), cap)] = True                    # greedy from n = 1 (or n_min) ...
    fails = np.flatnonzero(~grow)
    n = int(fails[0]) if fails.size else cap
    if n_min == 0 and theta[0] >= theta[n]:                  # ... against the plain step
        n = 0
    return BudgetChoice(n, float(phi[n]), float(base + cv[n]))
