"""Statistics of a run's records: medians per dataset and method, the oracle fixed budget, paired per-prompt ratios with
bootstrap intervals, and records priced by a cost model instead of the clock.
"""
from __future__ import annotations

import statistics

import numpy as np
from scipy.stats import bootstrap

from caddtree.bench.methods import COST_METHODS, TREE_METHODS, method_family


def priced_ms_per_token(r: dict, cost) -> float | None:
    """A record's decode ms/token priced by the cost model instead of the clock: each round at C_d (the first
    stage's where the draft gate skipped the costly one, none where the speculation gate drafted nothing), overhead and
    C_v(n; ℓ), ℓ rebuilt from the accepted
    tokens; `ar` at C_v(0; ℓ) alone. What the policy chose, priced as CaDDTree itself prices it, free of the
    machine's timing noise. Records from before the per-round `second_stage` list price every round's draft at
    the run's share of costly rounds. None where there is nothing to price (peers, trees past the profile)."""
    sizes, acc = r.get("tree_sizes"), r.get("accepted")
    if cost is None or not sizes or acc is None or max(sizes) > cost.max_nodes:
        return None
    speculative = r["method"] != "ar"
    full = r.get("second_stage")
    if full is None:
        share = 1.0 if r.get("second_stage_rounds") is None else r["second_stage_rounds"] / len(sizes)
        full = [share] * len(sizes)
    drafted = r.get("drafted") or [1] * len(sizes)  # the speculation gate's plain steps draft nothing
    ctx, total = r["prompt_len"] - 1, 0.0
    for n, a, f, d in zip(sizes, acc, full, drafted):
        if speculative:  # n = 0: C_v(0) + o_plain, as the policy prices its plain option
            total += cost.overhead_ms(ctx) + cost.verify_ms(n, ctx)
            total += d * (f * cost.draft_ms(ctx) + (1 - f) * cost.cheap_draft_ms(ctx))
        else:
            total += cost.plain_step_ms(ctx)
        ctx += a + 1
    return total / r["new_tokens"]


OTHER_MEASURES = ("pooled", "priced")  # besides medians, CaDDTree against the fixed budget best by each (summary)


def summarize(records: list[dict], price=None) -> dict:
    """records -> {"rows": [per dataset x method], "oracle": [per dataset x fixed-budget family]}.

    price(record) -> ms/token or None, optional (`priced_ms_per_token` with the run's cost model): each row then
    also has the median priced ms/token, and each oracle row CaDDTree's ratio to the best fixed budget by that
    price (the policy's choices compared without the clock's noise)."""
    ok = [r for r in records if "ms_per_token" in r and not r.get("error") and not r.get("skipped")]
    datasets = list(dict.fromkeys(r["dataset"] for r in records))
    methods = list(dict.fromkeys(r["method"] for r in records))
    rows = []
    for ds in datasets:
        groups = {m: [r for r in ok if r["dataset"] == ds and r["method"] == m] for m in methods}
        med = {m: statistics.median(r["ms_per_token"] for r in rs) for m, rs in groups.items() if rs}
        for m in methods:
            rs = groups[m]
            allr = [r for r in records if r["dataset"] == ds and r["method"] == m]
            if not rs:
                reason = next((r.get("skipped") or r.get("error") for r in allr), None)
                if allr:
                    rows.append({"dataset": ds, "method": m, "n": 0, "note": reason or "no result"})
                continue
            sizes = [s for r in rs for s in r.get("tree_sizes", [])]
            rounds = sum(r.get("rounds", 0) for r in rs)
            matched = [r["match_ar"] for r in rs if r.get("match_ar") is not None]
            priced = [(f, a) for r in rs for f, a in zip(r.get("predicted_phi") or [], r.get("accepted", []))
                      if f is not None]
            prices = [price(r) for r in rs] if price is not None else []
            tokens = sum(r["new_tokens"] for r in rs)
            rows.append({
                "dataset": ds, "method": m, "n": len(rs), "ms_per_token": med[m],
                # the whole set's decode time over its tokens: a throughput, not a typical prompt's time
                "pooled_ms_per_token": (sum(r["decode_ms"] for r in rs) / tokens
                                        if tokens and all("decode_ms" in r for r in rs) else None),
                "priced_ms_per_token": (statistics.median(prices) if prices and None not in prices else None),
                "speedup": med["ar"] / med[m] if "ar" in med else None,
                "tau": sum(r["new_tokens"] for r in rs) / rounds if rounds else None,
                "tree_size_mean": float(np.mean(sizes)) if sizes else None,
                "tree_size_std": float(np.std(sizes)) if sizes else None,
                "match": sum(matched), "compared": len(matched),
                "second_stage_share": (sum(r["second_stage_rounds"] for r in rs) / rounds
                                       if rounds and all(r.get("second_stage_rounds") is not None for r in rs)
                                       else None),
                # CaDDTree: Φ it expected per round against the draft tokens accepted (is the drafter calibrated?)
                "phi_predicted": float(np.mean([f for f, _ in priced])) if priced else None,
                "phi_accepted": float(np.mean([a for _, a in priced])) if priced else None,
                "drafter": next((r.get("drafter") for r in rs if r.get("drafter")), None), "note": ""})
    oracle = []
    by = {(r["dataset"], r["method"]): r for r in rows if r["n"]}
    for ds in datasets:
        for fam, ours in zip(TREE_METHODS, COST_METHODS):
            fixed = [(by[k]["ms_per_token"], method_family(k[1])[1], k[1]) for k in by
                     if k[0] == ds and method_family(k[1])[0] == fam]
            if not fixed:
                continue
            best_ms, best_b, best_method = min(fixed)
            by_measure = {}  # measure -> (ms/token, B) of the fixed budget best by it, if every budget has it
            for measure in OTHER_MEASURES:
                vals = [(by[(ds, m)][f"{measure}_ms_per_token"], b) for _, b, m in fixed]
                by_measure[measure] = min(vals) if all(v is not None for v, _ in vals) else (None, None)
            variants = [m for m in methods if (ds, m) in by and m.partition("@")[0] == ours] or [ours]  # @cd2, ...
            for m in variants:
                o = {"dataset": ds, "family": fam, "oracle_budget": best_b, "oracle_ms_per_token": best_ms,
                     "method": m, "ms_per_token": None, "ratio": None}
                for measure, (ms, b) in by_measure.items():
                    mine = by[(ds, m)][f"{measure}_ms_per_token"] if (ds, m) in by else None
                    o[f"{measure}_oracle_budget"] = b
                    o[f"{measure}_ratio"] = mine / ms if ms is not None and mine is not None else None
                if (ds, m) in by:
                    o["ms_per_token"] = by[(ds, m)]["ms_per_token"]
                    o["ratio"] = o["ms_per_token"] / best_ms  # <= 1: CaDDTree at least as fast as the oracle budget
                    o.update(paired_ratio(ok, ds, m, best_method))
                oracle.append(o)
    return {"rows": rows, "oracle": oracle}


def paired_ratio(records: list[dict], dataset: str, method: str, other: str, confidence: float = 0.9) -> dict:
    """ms/token of `method` over `other` prompt by prompt (both ran back to back on each prompt): the median ratio,
    a bootstrap confidence interval of that median, and on how many prompts `method` was faster.

    The ratio of the two medians compares different prompts' times; on a noisy shared CPU the per-prompt ratio,
    whose prompt-to-prompt variation cancels, shows whether a difference is larger than the noise."""
    ms = {}
    for r in records:
        if r["dataset"] == dataset and r["method"] in (method, other):
            ms.setdefault(str(r["prompt_id"]), {})[r["method"]] = r["ms_per_token"]
    ratios = np.array([v[method] / v[other] for v in ms.values() if method in v and other in v])
    out = {"paired_n": len(ratios), "paired_ratio": float(np.median(ratios)) if len(ratios) else None,
           "paired_faster": int((ratios < 1).sum()), "paired_ci": None}
    if len(ratios) >= 3 and np.ptp(ratios) > 0:
        ci = bootstrap((ratios,), np.median, confidence_level=confidence, n_resamples=2000, method="percentile",
                       rng=np.random.default_rng(0)).confidence_interval
        out["paired_ci"] = (float(ci.low), float(ci.high))
    return out
