"""Price tree-size rules and draft gates on the counterfactual rounds of `collect.py` (no clock: each round at the
cost profile's C_d (or the first stage's), overhead and C_v(n; ℓ); the tokens it yields from the greedy output).

    [REAL=BENCH_RUN_DIR] [MEASURED=BENCH_RUN_DIR] python results/counterfactual/analyse.py COST_PROFILE.json \
        ROUNDS.jsonl[.gz] [...]

With MEASURED, the rules still choose on the profile but every round is charged decoding's own costs of that run
(`measured.py`): the clairvoyant rules choose on those too.

A rule is a function of one round's data -> (stage, n); a prompt's priced ms/token = Σ round ms / Σ (1 + accepted).
The rounds are those of one trajectory (CaDDTree without gate), so a rule that accepts more per round would have
visited fewer, different rounds of the same text: a renewal-reward estimate, fair between rules on equal footing.
"""
import gzip, json, os, sys
from collections import defaultdict

import numpy as np

from caddtree.budget import DraftGate
from caddtree.costmodel import load_cost_model

cm = load_cost_model(sys.argv[1])
if os.environ.get("MEASURED"):
    sys.path.insert(0, os.path.dirname(__file__))
    from measured import MeasuredCosts
    price = MeasuredCosts(os.environ["MEASURED"].split(","))
    print(price.describe())
else:
    price = cm  # what a round is charged
prompts = [json.loads(l) for f in sys.argv[2:] for l in (gzip.open(f, "rt") if f.endswith(".gz") else open(f))]
NMAX = 24


def costs(r, stage, model=None):
    """[NMAX + 1] round ms for n = 0..NMAX with the given draft stage, by the profile (or `model`)."""
    m = cm if model is None else model
    d = m.draft_ms(r["ctx"]) if stage == "full" else m.cheap_draft_ms(r["ctx"])
    return d + m.overhead_ms(r["ctx"]) + m.verify_curve(r["ctx"])[:NMAX + 1]


def arr(r, key):
    a = np.array(r[key], dtype=np.float64)[:NMAX + 1]
    return np.concatenate((a, np.full(NMAX + 1 - len(a), a[-1])))


def phi(r, stage, cal=None):
    lw = np.array(r["lw_" + stage], dtype=np.float64)[:NMAX]
    d = np.exp(lw)
    if cal is not None:
        d = cal(d, r, stage)
    return np.concatenate(([0.0], np.cumsum(d), np.full(NMAX - len(d), np.sum(d))))[:NMAX + 1]


def ratio_rule(r, stage, cal=None, model=None):
    th = (1 + phi(r, stage, cal)) / costs(r, stage, model)
    n = 1 + int(np.argmax(th[1:]))
    return 0 if th[0] >= th[n] else n


def run(prompt, rule):
    """rule(round) -> (stage, n), called in round order (it may learn as it goes) -> priced ms/token, τ, mean n"""
    ms = tok = 0.0
    ns = []
    for r in prompt["rounds"]:
        stage, n = rule(r)
        n = min(n, len(r["lw_" + stage]))  # a tree cut by the room left
        ms += costs(r, stage, price)[n]
        tok += 1 + arr(r, "acc_" + stage)[n]
        ns.append(n)
    return ms / tok, tok / len(prompt["rounds"]), float(np.mean(ns))


def run_fixed_point(prompt, make):
    """make(θ*) -> rule; θ* iterated to the rate the rule itself then reaches on the prompt."""
    theta = 1 / 60.0
    for _ in range(8):
        ms, tau, n = run(prompt, make(theta))
        theta = 1 / ms
    return ms, tau, n


def fixed(n, stage="full"):
    return lambda r: (stage, n)


def shipped(r):
    return "full", ratio_rule(r, "full")


def gated(delay="none", cal=None, model=None, **kw):
    """DraftGate with realised gains, as the engine. A round's gains are observed at once (delay "none"), or
    ("deepest", the engine's rule) at the first later round whose start has the output longer than both trees are
    deep (the first stage's depth taken as its node count: lookup trees are chains)."""
    gate = DraftGate(**kw)
    pending = []  # (tokens of output needed, band, θ1, θ2)

    def rule(r):
        while pending and pending[0][0] <= r["start"]:
            gate.observe(*pending.pop(0)[1:])
        cc, cf = (cal or {}).get("cheap"), (cal or {}).get("full")
        c = costs(r, "cheap", model)
        n1 = ratio_rule(r, "cheap", cc, model)
        th1 = (1 + phi(r, "cheap", cc)[n1]) / c[n1]
        band = gate.band(th1, 1 / c[0])
        if not gate.run_rest(band):
            return "cheap", n1
        n2 = ratio_rule(r, "full", cf, model)
        a1, a2 = arr(r, "acc_cheap")[n1], arr(r, "acc_full")[n2]
        obs = (band, (1 + a1) / c[n1], (1 + a2) / costs(r, "full", model)[n2])
        if delay == "none":
            gate.observe(*obs)
        else:
            deep = max(n1, max(r["depth_full"][:n2], default=0))
            pending.append((r["start"] + deep + 1, *obs))
            pending.sort(key=lambda x: x[0])
        return "full", n2
    return rule


def hindsight(stages=("full",)):
    """Clairvoyant: each round the (stage, n) maximising (1 + A) - θ* C, θ* the prompt's resulting rate (iterated)."""
    def make(theta):
        def rule(r):
            best = None
            for st in stages:
                v = 1 + arr(r, "acc_" + st) - theta * costs(r, st, price)
                n = int(np.argmax(v))
                if best is None or v[n] > best[0]:
                    best = (v[n], st, n)
            return best[1], best[2]
        return rule
    return make


class OnlineCal:
    """Acceptance rate per (depth bucket, δ bin) over predicted δ, learned within a generation from every node of
    the round's full tree (greedy: the output decides each node once it has passed the round); prior: ratio 1."""
    EDGES = np.array([0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9])

    def __init__(self, depths=(1, 2, 3, 4, 6), strength=4.0, memory=0.995, by_depth=True, monotone=True):
        self.dedges = np.array(depths)
        self.a, self.m, self.by_depth, self.monotone = strength, memory, by_depth, monotone
        shape = (len(depths) + 1 if by_depth else 1, len(self.EDGES) + 1)
        self.hit = {st: np.zeros(shape) for st in ("full", "cheap")}
        self.pred = {st: np.zeros(shape) for st in ("full", "cheap")}

    def _idx(self, d, r, st):
        dep = np.array(r["depth_" + st] if "depth_" + st in r else r["depth_full"])[:len(d)]
        di = np.searchsorted(self.dedges, dep, side="left") if self.by_depth else np.zeros(len(d), int)
        return di, np.searchsorted(self.EDGES, d)

    def __call__(self, d, r, st):
        if st == "cheap":
            return d
        di, bi = self._idx(d, r, st)
        ratio = (self.hit[st] + self.a) / (self.pred[st] + self.a)
        out = np.minimum(1.0, d * ratio[di, bi])
        return np.minimum.accumulate(out) if self.monotone else out

    def observe(self, r, st):
        if st == "cheap":
            return
        d = np.exp(np.array(r["lw_" + st], dtype=np.float64))[:NMAX]
        hit = np.diff(np.array(r["acc_" + st], dtype=np.float64))[:len(d)]
        di, bi = self._idx(d, r, st)
        self.hit[st] *= self.m
        self.pred[st] *= self.m
        np.add.at(self.hit[st], (di, bi), hit)
        np.add.at(self.pred[st], (di, bi), d)


def online(**kw):
    cal = OnlineCal(**kw)
    def rule(r):
        n = ratio_rule(r, "full", cal)
        cal.observe(r, "full")
        return "full", n
    return rule


def global_rule(theta=None, cal=None):
    """argmax_n (1 + Φ_n) - θ* C(n): θ* fixed (a prompt's rate) or, if None, the running rate of the rounds so far
    (predicted: tokens 1 + Φ of the chosen trees over their priced ms)."""
    run_tok, run_ms = [0.0], [0.0]
    def rule(r):
        th = theta if theta is not None else (run_tok[0] / run_ms[0] if run_ms[0] > 0 else None)
        ph, c = phi(r, "full", cal), costs(r, "full")
        if th is None:
            n = ratio_rule(r, "full", cal)
        else:
            n = int(np.argmax(1 + ph - th * c))
        run_tok[0] += 1 + ph[n]
        run_ms[0] += c[n]
        return "full", n
    return rule


def hindsight_gate(theta):
    """Each round the shipped rule's tree of the stage whose realised (1 + A) - θ* C is larger: a perfect gate."""
    def rule(r):
        best = None
        for st in ("full", "cheap"):
            n = ratio_rule(r, st)
            v = 1 + arr(r, "acc_" + st)[n] - theta * costs(r, st, price)[n]
            if best is None or v > best[0]:
                best = (v, st, n)
        return best[1], best[2]
    return rule


def fit_isotonic(train, stage="full"):
    """P(node accepted | δ) by isotonic regression on the training prompts' rounds."""
    from scipy.optimize import isotonic_regression
    xs, ys = [], []
    for p in train:
        for r in p["rounds"]:
            lw = np.exp(np.array(r["lw_" + stage], dtype=np.float64))[:NMAX]
            acc = np.array(r["acc_" + stage], dtype=np.float64)
            hit = np.diff(acc)[:len(lw)]
            xs += list(lw); ys += list(hit)
    order = np.argsort(xs)
    x, y = np.asarray(xs)[order], isotonic_regression(np.asarray(ys)[order]).x
    return lambda d, r, st: np.interp(d, x, y)


def size_scaled(d, c):
    """Node weights δ [k] -> weights whose prefix sums are c_n Φ_n (c [NMAX + 1] per prefix size n, c_0 unused): Φ
    calibrated by tree size through the `cal` hook of `phi`, which maps δ."""
    return np.diff(np.r_[0.0, c[1:len(d) + 1] * np.cumsum(d)])


class OnlineSizeCal:
    """accepted / Φ_n per prefix size n, learned within a generation from the verified trees only (as the engine could:
    a round tells how the prefixes up to its chosen size fared); sizes never verified take the largest verified
    size's ratio; prior ratio 1 with `strength` expected nodes."""

    def __init__(self, strength=4.0, memory=0.99):
        self.hit, self.pred = np.zeros(NMAX + 1), np.zeros(NMAX + 1)
        self.a, self.m = strength, memory

    def __call__(self, d, r, st):
        c = (self.hit + self.a) / (self.pred + self.a)
        seen = np.nonzero(self.pred)[0]
        if len(seen):
            c[seen[-1] + 1:] = c[seen[-1]]
        return size_scaled(d, c)

    def observe(self, r, st, n):
        self.hit *= self.m
        self.pred *= self.m
        self.hit[1:n + 1] += arr(r, "acc_" + st)[1:n + 1]
        self.pred[1:n + 1] += phi(r, st)[1:n + 1]


def online_size(gate=False, **kw):
    cals = {"full": OnlineSizeCal(**kw), "cheap": OnlineSizeCal(**kw)}
    base = gated(cal=cals) if gate else None

    def rule(r):
        st, n = base(r) if gate else ("full", ratio_rule(r, "full", cals["full"]))
        cals[st].observe(r, st, min(n, len(r["lw_" + st])))
        return st, n
    return rule


def fit_by_size(train, stage="full"):
    """Φ by tree size: per prefix size n, accepted / Φ_n over the training prompts' rounds (c_n), as a map of the
    nodes' δ whose prefix sums are c_n Φ_n (the `cal` hook of `phi` calibrates δ, not Φ)."""
    acc = sum(arr(r, "acc_" + stage) for p in train for r in p["rounds"])
    pred = sum(phi(r, stage) for p in train for r in p["rounds"])
    c = np.where(pred > 0, acc / np.maximum(pred, 1e-9), 1.0)
    print(f"accepted / Φ_n by tree size n on the training rounds ({stage}): " + " ".join(f"{n}:{c[n]:.2f}" for n in range(1, 16)))
    return lambda d, r, st: size_scaled(d, c)


def main():
    by_set = defaultdict(list)
    for p in prompts:
        by_set[p["set"].split(":")[0]].append(p)
    train = by_set.pop("train", [])
    rules = {f"B={n}": (lambda n: lambda p: run(p, fixed(n)))(n) for n in range(1, 17)}
    rules["lookup B=3"] = lambda p: run(p, fixed(3, "cheap"))
    rules["caddtree nogate"] = lambda p: run(p, shipped)
    rules["caddtree gate"] = lambda p: run(p, gated())
    if train:
        cal = fit_isotonic(train)
        rules["caddtree nogate, iso-cal(train)"] = lambda p: run(p, lambda r: ("full", ratio_rule(r, "full", cal)))
        by_size = fit_by_size(train)
        rules["caddtree nogate, size-cal(train)"] = lambda p: run(p, lambda r: ("full",
                                                                                ratio_rule(r, "full", by_size)))
        by_size_both = {"full": by_size, "cheap": fit_by_size(train, "cheap")}
        rules["caddtree gate, size-cal(train)"] = lambda p: run(p, gated(cal=by_size_both))
    if price is not cm:  # the rules on the costs they are charged: what a perfect profile would be worth
        rules["caddtree nogate, charged costs"] = lambda p: run(p, lambda r: ("full", ratio_rule(r, "full",
                                                                                                 model=price)))
        rules["caddtree gate, charged costs"] = lambda p: run(p, gated(model=price))
    rules["online size cal"] = lambda p: run(p, online_size())
    rules["online size cal, gate"] = lambda p: run(p, online_size(gate=True))
    rules["online cal δ"] = lambda p: run(p, online(by_depth=False))
    rules["online cal depth×δ"] = lambda p: run(p, online())
    rules["online cal depth×δ, no min"] = lambda p: run(p, online(monotone=False))
    rules["online cal depth×δ, a=16"] = lambda p: run(p, online(strength=16.0))
    rules["global θ* running"] = lambda p: run(p, global_rule())
    rules["global θ* = own rate"] = lambda p: run_fixed_point(p, lambda th: global_rule(th))
    rules["caddtree gate, observed as the engine"] = lambda p: run(p, gated("deepest"))
    for kw in ({"memory": 0.5}, {"memory": 0.97}, {"explore_every": 4}, {"explore_every": 16}, {"bands": (1.1,)},
               {"bands": (1.05, 1.2, 1.4, 1.7, 2.2)}, {"warmup": 1}):
        rules["caddtree gate " + ",".join(f"{k}={v}" for k, v in kw.items())] = (
            lambda kw: lambda p: run(p, gated(**kw)))(kw)
    rules["hindsight gate (shipped sizes)"] = lambda p: run_fixed_point(p, hindsight_gate)
    rules["hindsight full"] = lambda p: run_fixed_point(p, hindsight())
    rules["hindsight full+cheap"] = lambda p: run_fixed_point(p, hindsight(("full", "cheap")))
    res = {name: {s: [f(p) for p in ps] for s, ps in by_set.items()} for name, f in rules.items()}
    sets = list(by_set)
    print("priced ms/token: geometric mean over prompts of (rule / B=5); τ in brackets")
    print("%-44s" % "rule" + "".join("%15s" % s[:13] for s in sets) + "%9s" % "all")
    base = {s: np.array([x[0] for x in res["B=5"][s]]) for s in sets}
    for name in rules:
        row, allr = "%-44s" % name, []
        for s in sets:
            v = np.array([x[0] for x in res[name][s]])
            rr = v / base[s]
            allr += list(rr)
            row += "%9.3f [%3.1f]" % (np.exp(np.mean(np.log(rr))), np.mean([x[1] for x in res[name][s]]))
        print(row + "%9.3f" % np.exp(np.mean(np.log(allr))))
    print("\noracle fixed budget per set (best median priced ms/token), CaDDTree (gate) / oracle by medians:")
    for s in sets:
        med = {n: np.median([x[0] for x in res[n][s]]) for n in rules if n.startswith("B=")}
        cad = np.median([x[0] for x in res["caddtree gate"][s]])
        b_all = min(med, key=med.get)
        b_run = min(("B=3", "B=5", "B=8"), key=med.get)
        print(f"  {s:14s} among B=3/5/8 (the bench's): {b_run} -> {cad / med[b_run]:.3f}; "
              f"among B=1..16: {b_all} -> {cad / med[b_all]:.3f}")
    print("\nnode acceptance by depth (nodes of the first 24 with δ > 0.1, DFlash + lookup tree): mean δ -> accepted")
    for s in sets:
        cells = []
        for lo, hi in ((1, 1), (2, 2), (3, 3), (4, 5), (6, 99)):
            d_sum = h_sum = k = 0
            for p in by_set[s]:
                for r in p["rounds"]:
                    d = np.exp(np.array(r["lw_full"], dtype=np.float64))[:NMAX]
                    hit = np.diff(np.array(r["acc_full"], dtype=np.float64))[:len(d)]
                    dep = np.array(r["depth_full"])[:len(d)]
                    m = (d > 0.1) & (dep >= lo) & (dep <= hi)
                    d_sum, h_sum, k = d_sum + d[m].sum(), h_sum + hit[m].sum(), k + m.sum()
            cells.append(f"depth {lo}{'+' if hi == 99 else '' if hi == lo else f'-{hi}'}: "
                         f"{d_sum / max(k, 1):.2f} -> {h_sum / max(k, 1):.2f}")
        print(f"  {s:14s} " + ", ".join(cells))
    real_dir = os.environ.get("REAL")  # a bench run over the same prompts: its own trajectories, priced alike
    if real_dir:
        from caddtree.bench import load_records, priced_ms_per_token
        real = {(r["dataset"], str(r["prompt_id"]), r["method"]): priced_ms_per_token(r, cm)
                for r in load_records(real_dir) if r.get("tree_sizes")}
        print(f"\nCaDDTree (gate) / B=5 per prompt, geometric mean: here against {real_dir} (each method on its own "
              "trajectory, priced by `bench.priced_ms_per_token`); |log ratio difference| median over prompts")
        for s in sets:
            here, there = [], []
            for p, g, b in zip(by_set[s], res["caddtree gate"][s], res["B=5"][s]):
                key = (s, p["id"])
                if (*key, "caddtree") in real and (*key, "ddtree:5") in real:
                    here.append(g[0] / b[0])
                    there.append(real[(*key, "caddtree")] / real[(*key, "ddtree:5")])
            if here:
                gm = lambda v: float(np.exp(np.mean(np.log(v))))  # noqa: E731
                print(f"  {s:14s} {gm(here):.3f} here, {gm(there):.3f} there; per prompt they differ by "
                      f"{np.median(np.abs(np.log(np.array(here) / np.array(there)))):.3f} (median |log|)")


if __name__ == "__main__":
    main()
