"""Decoding's own costs as a price list for `analyse.py` (MEASURED=RUN_DIR[,RUN_DIR...]): the rules still choose on
the cost profile, as the engine does, but each replayed round is charged what rounds of that size cost in real
decoding (bench records with `verify_ms_rounds`), so a profile's shape errors show up in the score.

- C_v(n; ℓ) = a_n + s ℓ: per tree size n the mean of its verify times with a slope s in ℓ common to all sizes
  (within-size least squares); sizes with fewer than MIN_ROUNDS rounds are interpolated linearly in n between
  measured sizes (extrapolated with the measured tree sizes' least-squares per-node step).
- C_d: the median per-round draft time of the fixed-budget records (both stages every round); the first stage alone
  and the second's extra cost from CaDDTree's records (least squares over records of draft_ms = R c1 + S c2, R rounds,
  S of them with the second stage).
- overhead: the median per-round overhead of the fixed-budget records (tree build, acceptance, compaction).
"""
import numpy as np

from caddtree.bench import load_records

MIN_ROUNDS = 30


class MeasuredCosts:
    def __init__(self, runs, nmax: int = 64):
        recs = [r for d in runs for r in load_records(d) if r.get("verify_ms_rounds")]
        by_n = {}
        for r in recs:
            ctx = r["prompt_len"] - 1
            for n, a, ms in zip(r["tree_sizes"], r["accepted"], r["verify_ms_rounds"]):
                by_n.setdefault(n, []).append((ctx, ms))
                ctx += a + 1
        sizes = sorted(n for n, v in by_n.items() if len(v) >= MIN_ROUNDS)
        xs = np.concatenate([np.array(by_n[n])[:, 0] - np.mean(np.array(by_n[n])[:, 0]) for n in sizes])
        ys = np.concatenate([np.array(by_n[n])[:, 1] - np.mean(np.array(by_n[n])[:, 1]) for n in sizes])
        self.slope = float(xs @ ys / (xs @ xs))
        a = {n: float(np.mean(np.array(by_n[n])[:, 1] - self.slope * np.array(by_n[n])[:, 0])) for n in sizes}
        ns = np.array(sizes, dtype=float)
        # beyond the largest measured size: the least-squares per-node step over the tree sizes (n >= 1), never
        # negative (the last two sizes' step alone was -2 ms in results/zen5-lean: 9 nodes measured over 10)
        trees = [n for n in sizes if n >= 1]
        step = max(0.0, float(np.polyfit(trees, [a[n] for n in trees], 1)[0])) if len(trees) >= 2 else 0.0
        self.a = np.array([np.interp(n, ns, [a[k] for k in sizes]) if n <= sizes[-1]
                           else a[sizes[-1]] + step * (n - sizes[-1]) for n in range(nmax + 1)])
        self.sizes, self.counts = sizes, {n: len(by_n[n]) for n in sizes}
        fixed = [r for r in recs if str(r["method"]).startswith("ddtree")]
        self.draft = float(np.median([r["draft_ms"] / r["rounds"] for r in fixed]))
        self.overhead = float(np.median([r["overhead_ms"] / r["rounds"] for r in fixed]))
        cad = [r for r in recs if r.get("second_stage_rounds") is not None]
        A = np.array([[r["rounds"], r["second_stage_rounds"]] for r in cad], dtype=float)
        self.cheap, self.extra = np.linalg.lstsq(A, np.array([r["draft_ms"] for r in cad]), rcond=None)[0]

    @property
    def max_nodes(self) -> int:
        return len(self.a) - 1

    def verify_curve(self, ctx: float) -> np.ndarray:
        return self.a + self.slope * ctx

    def draft_ms(self, ctx: float) -> float:
        return self.draft

    def cheap_draft_ms(self, ctx: float) -> float:
        return float(self.cheap)

    def overhead_ms(self, ctx: float) -> float:
        return self.overhead

    def describe(self) -> str:
        return (f"measured costs: C_v(n; 256) " + " ".join(f"{n}:{self.a[n] + 256 * self.slope:.1f}" for n in range(17))
                + f"; slope {1000 * self.slope:.2f} ms per 1000 tokens; C_d {self.draft:.2f} (first stage "
                f"{self.cheap:.2f}, second's extra {self.extra:.2f}); overhead {self.overhead:.2f} ms; sizes measured "
                + ",".join(map(str, self.sizes)))
