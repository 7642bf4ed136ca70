"""Cost model of a machine: C_v(n; ℓ) (verify n tree nodes + root on a KV cache of ℓ), C_d(ℓ) (one drafting round)
and the per-round overhead (tree build, stop rule, acceptance, cache compaction) o(ℓ) + o_n · n for a round that
verifies n >= 1 tree nodes, o_plain(ℓ) for a round that chose the plain step (n = 0: one row's choice, nothing
compacted), all in milliseconds. Pure logic: fitting and evaluation only (the file format is `costfile`, the
measurement `profile`).

The fit turns noisy medians into a curve CaDDTree can trust. Per context length, C_v is fitted non-decreasing in n
(a larger tree never costs less); the default shape is monotone ("monotone", isotonic least squares in relative
error), the paper's is convex ("convex"). `budget.choose_tree_size` takes the argmax of θ over all sizes, so it needs
no convexity; under a convex fit that argmax is the paper's first-failure stop. Why monotone: docs/design.md.

Rules (applied in `fit_cost_model` and `CostModel`):
- n: the grid (possibly non-uniform) must start 0, 1. C_v(0) is the root-only forward, i.e. a plain decoding step: no
  tree mask, a different kernel path, often well below the masked n = 1 forward; smearing that jump into the fit
  would misprice exactly the speculate-or-not decision, so C_v(0) is kept as measured (capped at C_v(1)) and only
  n >= 1 is fitted, then evaluated at every integer 1..n_max by linear interpolation (keeps either shape).
  `choose_tree_size` compares n = 0 explicitly. n > n_max is refused (`CaddtreeError`): the policy must never rely
  on an extrapolated cost.
- ℓ: every cost is made non-decreasing in ℓ (cumulative max over the ctx grid), linearly interpolated between grid
  ctxs; below the grid the first ctx's values are used; above it, linear extrapolation with the slope between the last
  two grid ctxs, clamped at >= 0 (for C_v that per-n slope is itself projected onto curves of the fit's shape, so
  extrapolated curves keep it).
- passes: a linear kernel that multiplies rows in passes of g (`row_group`) pays a step each time a tree starts a new
  pass; the profile measures both sides of the first pass boundaries (`profile.size_grid`). The monotone fit follows
  those steps as measured. The convex fit prices them as C_v(n) = f(n) + J · ⌊n / g⌋ for n >= 1 (n + 1 rows with the
  root), f convex non-decreasing, J >= 0 per ctx (`pass_ms`, the same ℓ rules as C_d; g = 1: no J).
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import lsq_linear

from caddtree.errors import CaddtreeError

VERIFY_FITS = ("monotone", "convex")  # shapes of the C_v fit for n >= 1 (measurements' "verify_fit"); first: default
_TOL = 1e-6  # relative tolerance on the shape checks of a saved fit (solver round-off)


@dataclass
class CostModel:
    ctxs: list[int]          # context-length grid, increasing
    verify: np.ndarray       # [len(ctxs), n_max + 1] fitted C_v(n; ctx) for n = 0..n_max, ms
    verify_slope: np.ndarray  # [n_max + 1] dC_v/dℓ beyond the last ctx, ms per token (>= 0, same shape rules)
    draft: np.ndarray        # [len(ctxs)] fitted C_d(ctx), ms
    overhead: np.ndarray     # [len(ctxs)] fitted per-round overhead, ms
    cheap_draft: np.ndarray | None = None  # [len(ctxs)] C_d of a two-stage drafter's first stage alone (or None)
    row_group: int = 1       # rows per pass of the verify kernel (module docstring)
    pass_ms: np.ndarray | None = None  # [len(ctxs)] J, the jump in C_v per extra pass (zeros if row_group == 1)
    verify_fit: str = "convex"  # shape of the C_v fit for n >= 1 (VERIFY_FITS); profiles saved before it: convex
    overhead_node: float = 0.0  # o_n, the overhead's part per tree node, ms (profiles saved before it: 0)
    overhead_plain: np.ndarray | None = None  # [len(ctxs)] o_plain, the plain option's overhead, ms (None: o)
    measurements: dict = field(default_factory=dict)  # raw data the fit came from (saved for audit/refit)
    provenance: dict = field(default_factory=dict)

    def __post_init__(self):
        self.ctxs = [int(c) for c in self.ctxs]
        self.verify = np.asarray(self.verify, dtype=np.float64)
        self.verify_slope = np.asarray(self.verify_slope, dtype=np.float64)
        self.draft = np.asarray(self.draft, dtype=np.float64)
        self.overhead = np.asarray(self.overhead, dtype=np.float64)
        if self.cheap_draft is not None:
            self.cheap_draft = np.asarray(self.cheap_draft, dtype=np.float64)
        self.row_group = int(self.row_group)
        self.pass_ms = np.zeros(len(self.ctxs)) if self.pass_ms is None else np.asarray(self.pass_ms, np.float64)
        self.overhead_node = float(self.overhead_node)
        if self.overhead_plain is not None:
            self.overhead_plain = np.asarray(self.overhead_plain, dtype=np.float64)
        passes = pass_count(self.verify.shape[1] - 1, self.row_group)  # [max_nodes + 1] ⌊n / g⌋ (0 if g = 1)
        # C_v with its pass jumps and the overhead's per-node part on the ctx grid, and its slope past the grid:
        # `verify_curve` (every round, twice with a draft gate) blends one table; the ops saved weigh there, run
        # cache-cold right after a verify
        self._curve = self.verify + self.pass_ms[:, None] * passes + self.overhead_node * np.arange(passes.size)
        self._curve_slope = self.verify_slope + self._scalar_slope(self.pass_ms) * passes
        # n = 0 pays the plain option's overhead, not a tree round's fixed part (no acceptance over tree rows, no
        # compaction): every policy that adds o to the curve then prices it at C_v(0) + o_plain. On sampled text,
        # where a 1-node tree is near break-even, that gap decides (profile docstring, docs/sampling.md)
        self._curve[:, 0] += self.plain_offset
        self._curve_slope[0] += self._scalar_slope(self.plain_overhead) - self._scalar_slope(self.overhead)
        # the per-ctx scalars as Python floats (table, slope past the grid): blended without numpy's per-call cost,
        # several times a round right after a verify forward (`_scalar_blend`: the same float64 operations)
        self._scalars = {name: (table.tolist(), float(self._scalar_slope(table))) for name, table in (
            ("draft", self.draft), ("overhead", self.overhead), ("cheap_draft", self.cheap_draft),
            ("overhead_plain", self.plain_overhead)) if table is not None}
        self._scalars["plain_verify"] = (self._curve[:, 0].tolist(), float(self._curve_slope[0]))
        self._scalars["plain_step"] = (self.verify[:, 0].tolist(), float(self.verify_slope[0]))  # C_v(0) alone
        # min over n >= 1 of (C_v(n) - C_v(0)) / n per grid ctx, and of its slope past the grid: blended like the
        # others, a lower bound of the same minimum on the blended curve (a min of blends >= the blend of the mins)
        rows = np.arange(1, self.max_nodes + 1)
        if len(rows):
            self._scalars["row_slope"] = (((self._curve[:, 1:] - self._curve[:, :1]) / rows).min(1).tolist(),
                                          float(((self._curve_slope[1:] - self._curve_slope[0]) / rows).min()))

    @property
    def max_nodes(self) -> int:
        return self.verify.shape[1] - 1

    @property
    def plain_overhead(self) -> np.ndarray:
        """[len(ctxs)] o_plain per grid ctx (the tree round's o where the profile did not measure it)."""
        return self.overhead if self.overhead_plain is None else self.overhead_plain

    @property
    def plain_offset(self) -> np.ndarray:
        """[len(ctxs)] o_plain - o per grid ctx: what `verify_curve`'s n = 0 entry adds to C_v(0)."""
        return self.plain_overhead - self.overhead

    def _ctx_blend(self, table, slope, ctx: float):
        """Interpolate rows of `table` (indexed by the ctx grid; an array, or a list of floats) at ctx, with the
        module's out-of-grid rule."""
        cs = self.ctxs
        if ctx <= cs[0]:
            return table[0]
        if ctx >= cs[-1]:
            return table[-1] + (ctx - cs[-1]) * slope
        j = bisect.bisect_right(cs, ctx)  # cs[j-1] <= ctx < cs[j]
        t = (ctx - cs[j - 1]) / (cs[j] - cs[j - 1])
        return (1.0 - t) * table[j - 1] + t * table[j]

    def _scalar_blend(self, name: str, ctx: float) -> float:
        """`_ctx_blend` of a per-ctx scalar table (draft, overhead, ...) at ctx, on Python floats (`_scalars`)."""
        table, slope = self._scalars[name]
        return self._ctx_blend(table, slope, ctx)

    def _scalar_slope(self, v: np.ndarray) -> float:
        return max((v[-1] - v[-2]) / (self.ctxs[-1] - self.ctxs[-2]), 0.0) if len(self.ctxs) > 1 else 0.0

    def verify_curve(self, ctx: float) -> np.ndarray:
        """[max_nodes + 1] C_v(n; ctx) + o_n · n for n = 1..max_nodes, C_v(0; ctx) + o_plain - o for n = 0: what a
        round of n tree nodes costs beyond C_d and the overhead's fixed part o (the per-round hot path: a few numpy
        ops). `verify_ms` reads it too."""
        return self._ctx_blend(self._curve, self._curve_slope, ctx)

    def plain_verify_ms(self, ctx: float) -> float:
        """`verify_curve(ctx)[0]` to the last bit, without the curve: C_v(0; ctx) + o_plain - o."""
        return self._scalar_blend("plain_verify", ctx)

    def plain_round_ms(self, ctx: float) -> float:
        """C_v(0; ctx) + o_plain: what the policy charges the plain option beyond C_d."""
        return self.overhead_ms(ctx) + self.plain_verify_ms(ctx)

    def plain_step_ms(self, ctx: float) -> float:
        """C_v(0; ctx) alone, the plain step's forward as measured."""
        return self._scalar_blend("plain_step", ctx)

    def row_slope_floor(self, ctx: float) -> float:
        """A lower bound of min over n >= 1 of (C_v(n; ctx) - C_v(0; ctx)) / n, the least verify cost per extra row
        from a plain step (`budget.TreeStop.plain_only`); inf where the profile has no tree sizes."""
        return self._scalar_blend("row_slope", ctx) if "row_slope" in self._scalars else float("inf")

    def verify_ms(self, n, ctx: float):
        """`verify_curve`'s entries in ms: C_v(n; ctx) + o_n · n (n >= 1), C_v(0; ctx) + o_plain - o (n = 0); n an
        int (-> float) or a 1-D array/tensor of ints (-> np.ndarray)."""
        idx = np.asarray(n.cpu() if hasattr(n, "cpu") else n, dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() > self.max_nodes):
            bad = int(idx.min()) if idx.min() < 0 else int(idx.max())
            raise CaddtreeError(f"verify cost asked for n={bad} tree nodes but the profile covers "
                                f"0..{self.max_nodes}: cap the tree budget at "
                                f"{self.max_nodes} or re-profile with a larger grid")
        out = self.verify_curve(ctx)[idx]
        return float(out) if out.ndim == 0 else out

    def draft_ms(self, ctx: float) -> float:
        return self._scalar_blend("draft", ctx)

    def cheap_draft_ms(self, ctx: float) -> float:
        """C_d of the first stage alone of a two-stage drafter (`drafter.LookupMixtureDrafter`); its full C_d if the
        profile did not measure one."""
        if self.cheap_draft is None:
            return self.draft_ms(ctx)
        return self._scalar_blend("cheap_draft", ctx)

    def overhead_ms(self, ctx: float) -> float:
        """The overhead's fixed part o(ℓ), charged to every round (its per-node part, and the plain option's
        difference o_plain - o, are in `verify_curve`)."""
        return self._scalar_blend("overhead", ctx)

    def plain_overhead_ms(self, ctx: float) -> float:
        """o_plain(ℓ), the overhead of a round that chose the plain step (`profile`: nothing compacted)."""
        return self._scalar_blend("overhead_plain", ctx)

    def option_overhead_ms(self, n: int, ctx: float) -> float:
        """The fixed overhead a choice of n tree nodes is priced with: o_plain(ℓ) for the plain option (n = 0), o(ℓ)
        for a tree (its per-node part is in `verify_curve`)."""
        return self.overhead_ms(ctx) if n > 0 else self.plain_overhead_ms(ctx)

    def round_ms(self, n, ctx: float):
        """Predicted wall time of one decoding round that verifies n tree nodes: draft + overhead + verify."""
        return self.draft_ms(ctx) + self.overhead_ms(ctx) + self.verify_ms(n, ctx)


def pass_count(n_max: int, group: int) -> np.ndarray:
    """[n_max + 1] the passes beyond the first that a verify of n = 0..n_max tree nodes (n + 1 rows) costs with a
    kernel of `group` rows per pass: ⌊n / group⌋; none for the plain step (n = 0, its own measured cost) or group 1."""
    n = np.arange(n_max + 1)
    return n // group if group > 1 else np.zeros(n_max + 1, dtype=np.int64)


# ---------------------------------------------------------------------------------------------------------- fitting

def _shape_fit(x, y, convex: bool, relative: bool = True, passes=None):
    """Least squares (in relative error: costs span 10x and small n matters as much as large) over curves that are
    non-decreasing in x and, if `convex`, have non-decreasing slopes (convexity on a non-uniform grid).

    passes [len(x)] (optional): y is fitted as f(x) + J · passes with f of that shape and J >= 0; returns (f, J).
    cvxpy + CLARABEL as in the paper; scipy's bounded least squares on a hinge basis if cvxpy is missing or fails.
    The result is re-integrated from clamped, sorted slopes so the shape holds exactly, not just to solver tolerance.
    """
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    k = np.zeros_like(x) if passes is None else np.asarray(passes, dtype=np.float64)
    w = 1.0 / np.maximum(np.abs(y), 1e-9) if relative else np.ones_like(y)
    if len(x) == 1:
        return y.copy() if passes is None else (y.copy(), 0.0)
    fit, jump = _solve_shape(x, y, w, convex, k)
    slope = np.maximum(np.diff(fit) / np.diff(x), 0.0)
    if convex:
        slope = np.maximum.accumulate(slope)
    fit = fit[0] + np.r_[0.0, np.cumsum(slope * np.diff(x))]
    return fit if passes is None else (fit, max(jump, 0.0))


def _solve_shape(x, y, w, convex: bool, k) -> tuple[np.ndarray, float]:
    """min Σ (w (z + J k - y))² over z of the shape, J >= 0 (J stays 0 where k is all 0) -> (z, J)."""
    with_jump = bool(np.any(k))
    try:
        import cvxpy as cp  # optional: the scipy path below solves the same problem; imported by a fit only
        z, J = cp.Variable(len(x)), cp.Variable(nonneg=True)
        slopes = cp.multiply(cp.diff(z), 1.0 / np.diff(x))
        cons = [cp.diff(z) >= 0] + ([cp.diff(slopes) >= 0] if convex and len(x) > 2 else [])
        pred = z + J * k if with_jump else z
        cp.Problem(cp.Minimize(cp.sum_squares(cp.multiply(w, pred - y))), cons).solve(solver=cp.CLARABEL)
        if z.value is None or not np.all(np.isfinite(z.value)):
            raise ValueError("solver returned no solution")
        return np.asarray(z.value, dtype=np.float64), float(J.value) if with_jump else 0.0
    except Exception:  # cvxpy absent or solver failure: same problem, bounded-variable form
        # y_j = c + Σ_m e_m φ_m(x_j) (+ J k_j), e_m, J >= 0; φ = steps (monotone) or hinges max(0, x - x_m) (convex)
        xm = x[:-1] if convex else x[1:]
        basis = np.maximum(0.0, x[:, None] - xm[None]) if convex else (x[:, None] >= xm[None]).astype(np.float64)
        A = np.hstack([np.ones((len(x), 1)), basis] + ([k[:, None]] if with_jump else []))
        lb = np.r_[-np.inf, np.zeros(A.shape[1] - 1)]
        coef = lsq_linear(A * w[:, None], y * w, bounds=(lb, np.inf)).x
        return A[:, :-1] @ coef[:-1] if with_jump else A @ coef, float(coef[-1]) if with_jump else 0.0


def fit_cost_model(measurements: dict, provenance: dict | None = None) -> CostModel:
    """Fit a CostModel to measurements:

        {"ns": [0, 1, n_2, ..., n_max] (increasing, must start 0, 1), "ctxs": [ℓ_1, ...] (increasing),
         "verify_ms": [[ms per n] per ctx], "draft_ms": [ms per ctx], "overhead_ms": float or [ms per ctx],
         optional "overhead_node_ms": the overhead's part per tree node (default 0),
         optional "overhead_plain_ms": float or [ms per ctx], the plain option's overhead (default: overhead_ms),
         optional "cheap_draft_ms": [ms per ctx] (first stage of a two-stage drafter),
         optional "row_group": rows per pass of the verify kernel (default 1),
         optional "verify_fit": "monotone" (default) or "convex", the shape of C_v for n >= 1}

    (extra keys are kept). See the module docstring for the n/ℓ rules.
    """
    try:
        ns = [int(v) for v in measurements["ns"]]
        ctxs = [int(v) for v in measurements["ctxs"]]
        V = np.asarray(measurements["verify_ms"], dtype=np.float64)
        D = np.broadcast_to(np.asarray(measurements["draft_ms"], dtype=np.float64), (len(ctxs),))
        O = np.broadcast_to(np.asarray(measurements.get("overhead_ms", 0.0), dtype=np.float64), (len(ctxs),))
        On = float(measurements.get("overhead_node_ms", 0.0))
        Op = measurements.get("overhead_plain_ms")
        Op = None if Op is None else np.broadcast_to(np.asarray(Op, dtype=np.float64), (len(ctxs),))
        Dc = measurements.get("cheap_draft_ms")
        Dc = None if Dc is None else np.broadcast_to(np.asarray(Dc, dtype=np.float64), (len(ctxs),))
        group = int(measurements.get("row_group", 1))
        shape = str(measurements.get("verify_fit", VERIFY_FITS[0]))
    except (KeyError, TypeError, ValueError) as e:
        raise CaddtreeError(f"cost measurements are malformed ({e}): re-run `caddtree profile`") from None
    if ns[:2] not in ([0], [0, 1]) or np.any(np.diff(ns) <= 0) or not ctxs or np.any(np.diff(ctxs) <= 0):
        raise CaddtreeError("cost measurements need an increasing n grid starting 0, 1 (root-only and one-node "
                            "forwards) and an increasing ctx grid: re-run `caddtree profile`")
    if V.shape != (len(ctxs), len(ns)) or not (np.all(np.isfinite(V)) and np.all(np.isfinite(D))
                                               and np.all(np.isfinite(O))
                                               and (Op is None or np.all(np.isfinite(Op)))
                                               and (Dc is None or np.all(np.isfinite(Dc)))):
        raise CaddtreeError(f"cost measurements: verify_ms must be finite [ctxs x ns] = [{len(ctxs)} x {len(ns)}], "
                            f"got {list(V.shape)}: re-run `caddtree profile`")
    if not (np.isfinite(On) and On >= 0):
        raise CaddtreeError(f"cost measurements: overhead_node_ms must be finite and >= 0, got {On}: re-run "
                            f"`caddtree profile`")
    if group < 1:
        raise CaddtreeError(f"cost measurements: row_group must be >= 1, got {group}: re-run `caddtree profile`")
    if shape not in VERIFY_FITS:
        raise CaddtreeError(f"cost measurements: verify_fit must be one of {', '.join(VERIFY_FITS)}, got {shape!r}")
    convex = shape == "convex"
    grid = np.arange(ns[-1] + 1)
    k = pass_count(ns[-1], group)
    rows, jumps = np.zeros((len(ctxs), len(grid))), np.zeros(len(ctxs))
    for i in range(len(ctxs)):
        if len(ns) > 1:
            if convex:
                f, jumps[i] = _shape_fit(ns[1:], V[i, 1:], convex=True, passes=k[ns[1:]])
            else:  # the kernel's pass steps are part of the monotone curve itself: no J
                f = _shape_fit(ns[1:], V[i, 1:], convex=False)
            rows[i, 1:] = np.interp(grid[1:], ns[1:], f)
        rows[i, 0] = min(V[i, 0], rows[i, 1]) if len(ns) > 1 else V[i, 0]
    rows = np.maximum.accumulate(rows, axis=0)  # monotone in ℓ; a max of such curves keeps their shape
    slope = np.zeros(len(grid))
    if len(ctxs) > 1:
        raw = (rows[-1] - rows[-2]) / (ctxs[-1] - ctxs[-2])  # >= 0 after the cumulative max
        slope[0] = raw[0]
        if len(grid) > 1:  # extrapolated curves must keep the shape: project the n >= 1 slopes on it
            unit = max(float(raw[1:].max()), 1e-12)  # solve at O(1) scale: slopes are ~1e-2 ms/token
            slope[1:] = np.maximum(_shape_fit(grid[1:], raw[1:] / unit, convex=convex, relative=False) * unit, 0.0)
            slope[0] = min(raw[0], slope[1])
    mono = (lambda v: np.maximum.accumulate(_shape_fit(ctxs, v, convex=False)))
    return CostModel(ctxs, rows, slope, mono(D), mono(O), None if Dc is None else mono(Dc), group,
                     np.maximum(mono(jumps), 0.0) if group > 1 and convex else np.zeros(len(ctxs)), shape, On,
                     None if Op is None else mono(Op), measurements=dict(measurements),
                     provenance=dict(provenance or {}))


def check_cost_model(model: CostModel) -> str | None:
    """None if the fit is non-decreasing in n (and convex for n >= 1 if it was fitted convex), non-decreasing in ℓ,
    finite; else the problem."""
    V, s = model.verify, model.verify_slope
    scale = _TOL * max(1.0, float(np.max(np.abs(V))) if V.size else 1.0)
    if V.ndim != 2 or V.shape[0] != len(model.ctxs) or V.shape[1] < 1 or s.shape != (V.shape[1],) \
            or model.draft.shape != (len(model.ctxs),) or model.overhead.shape != (len(model.ctxs),) \
            or (model.cheap_draft is not None and model.cheap_draft.shape != (len(model.ctxs),)) \
            or model.plain_overhead.shape != (len(model.ctxs),):
        return "fit arrays have inconsistent shapes"
    if model.row_group < 1 or model.pass_ms.shape != (len(model.ctxs),):
        return "row_group below 1 or pass_ms of the wrong shape"
    if not (np.isfinite(model.overhead_node) and model.overhead_node >= 0):
        return "per-node overhead is negative or not finite"
    extra = (model.pass_ms, model.plain_overhead) + (() if model.cheap_draft is None else (model.cheap_draft,))
    if not all(np.all(np.isfinite(a)) for a in (V, s, model.draft, model.overhead, *extra)):
        return "fit has non-finite values"
    if np.any(np.diff(model.ctxs) <= 0):
        return "ctx grid is not increasing"
    if model.verify_fit not in VERIFY_FITS:
        return f"unknown verify_fit {model.verify_fit!r}"
    convex = model.verify_fit == "convex"
    if np.any(np.diff(V, axis=1) < -scale) or (convex and np.any(np.diff(V[:, 1:], n=2, axis=1) < -scale)):
        return f"verify cost is not {'convex ' if convex else ''}non-decreasing in n"
    if np.any(np.diff(V, axis=0) < -scale) or np.any(s < -scale) or np.any(np.diff(s) < -scale) \
            or (convex and np.any(np.diff(s[1:], n=2) < -scale)):
        return "verify cost is not non-decreasing in context length (or its extrapolation is not convex)"
    if any(np.any(np.diff(a) < -scale) for a in (model.draft, model.overhead, *extra)) \
            or np.any(model.pass_ms < -scale):
        return "draft/overhead/pass cost is not non-decreasing in context length (or a pass cost is negative)"
    return None
