"""A run's summary as Markdown (`summary.md`) and CSV (`summary.csv`).
"""
from __future__ import annotations

import csv
from pathlib import Path

from caddtree.bench.stats import OTHER_MEASURES


def _f(v, fmt="{:.2f}"):
    return "–" if v is None else fmt.format(v)


def write_summary(summary: dict, out_dir, header: str = "") -> str:
    """summary.md + summary.csv in out_dir; returns the Markdown."""
    out_dir = Path(out_dir)
    rows, oracle = summary["rows"], summary["oracle"]
    priced = any(r.get("priced_ms_per_token") is not None for r in rows)  # a column only where a profile priced
    md = [header, "| dataset | method | n | ms/token (median) | speed-up vs ar | τ | tree size mean ± std | "
                  "exact match vs ar |" + (" priced ms/token |" if priced else ""),
          "|---|---|---:|---:|---:|---:|---:|---:|" + ("---:|" if priced else "")]
    for r in rows:
        if not r["n"]:
            md.append(f"| {r['dataset']} | {r['method']} | 0 | – | – | – | – | {r['note']} |"
                      + (" – |" if priced else ""))
            continue
        ts = "–" if r["tree_size_mean"] is None else f"{r['tree_size_mean']:.1f} ± {r['tree_size_std']:.1f}"
        if r.get("second_stage_share") is not None:  # two-stage drafter under the draft gate
            ts += f" (stage 2 in {100 * r['second_stage_share']:.0f}% of rounds)"
        if r.get("phi_predicted") is not None:
            ts += f"; Φ {r['phi_predicted']:.2f} expected, {r['phi_accepted']:.2f} accepted"
        match = f"{r['match']}/{r['compared']}" if r["compared"] else "–"
        md.append(f"| {r['dataset']} | {r['method']} | {r['n']} | {r['ms_per_token']:.2f} | "
                  f"{_f(r['speedup'], '{:.2f}x')} | {_f(r['tau'])} | {ts} | {match} |"
                  + (f" {_f(r.get('priced_ms_per_token'))} |" if priced else ""))
    if oracle:
        pooled = any(o.get("pooled_ratio") is not None for o in oracle)
        md += ["", "Oracle fixed budget per dataset (best `ddtree:B` of this run, chosen after the runs) and "
                   "CaDDTree's ms/token ratio to it (< 1: CaDDTree faster): the ratio of the two medians, and the "
                   "median of the per-prompt ratios (the two ran back to back on each prompt) with its 90% bootstrap "
                   "interval and the prompts on which CaDDTree was faster."
               + (" Pooled: the set's total decode time over its total tokens (its throughput: long answers weigh "
                  "more), CaDDTree over the fixed budget best by that measure (its B in brackets)." if pooled else "")
               + (" Priced: the same records priced by the run's cost model instead of the clock "
                  "(`bench.priced_ms_per_token`), CaDDTree over the best fixed budget by that price (its B in "
                  "brackets): the policy's choices without the machine's timing noise." if priced else ""), "",
               "| dataset | family | oracle B | oracle ms/token | method | ms/token | ratio "
               "| per-prompt ratio [90% CI] | CaDDTree faster |" + (" pooled ratio |" if pooled else "")
               + (" priced ratio |" if priced else ""),
               "|---|---|---:|---:|---|---:|---:|---:|---:|" + "---:|" * (pooled + priced)]
        for o in oracle:
            paired = _f(o.get("paired_ratio"), "{:.3f}")
            if o.get("paired_ci"):
                paired += " [{:.2f}, {:.2f}]".format(*o["paired_ci"])
            faster = f"{o['paired_faster']}/{o['paired_n']}" if o.get("paired_n") else "–"
            other = "".join(" – |" if o.get(f"{k}_ratio") is None else
                            f" {o[f'{k}_ratio']:.3f} (B={o[f'{k}_oracle_budget']}) |"
                            for k, shown in zip(OTHER_MEASURES, (pooled, priced)) if shown)
            md.append(f"| {o['dataset']} | {o['family']} | {o['oracle_budget']} | {o['oracle_ms_per_token']:.2f} | "
                      f"{o['method']} | {_f(o['ms_per_token'])} | {_f(o['ratio'], '{:.3f}')} | {paired} | {faster} |"
                      + other)
    bad = [r for r in rows if r["n"] and r["compared"] and r["match"] < r["compared"]]
    if bad:
        md += ["", "Exact-match failures vs `ar` (greedy): " + ", ".join(
            f"{r['dataset']}/{r['method']} {r['compared'] - r['match']}" for r in bad)
               + " (peers hf/llamacpp are not expected to be bit-exact)."]
    text = "\n".join(md) + "\n"
    (out_dir / "summary.md").write_text(text)
    keys = ["dataset", "method", "n", "ms_per_token", "speedup", "tau", "tree_size_mean", "tree_size_std", "match",
            "compared", "drafter", "second_stage_share", "phi_predicted", "phi_accepted", "pooled_ms_per_token",
            "priced_ms_per_token", "note"]
    with open(out_dir / "summary.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys + ["oracle_budget", "oracle_ms_per_token", "ratio_to_oracle",
                                                 "paired_ratio_to_oracle", "paired_ci_low", "paired_ci_high",
                                                 "pooled_oracle_budget", "pooled_ratio_to_oracle",
                                                 "priced_oracle_budget", "priced_ratio_to_oracle"],
                           extrasaction="ignore")
        w.writeheader()
        for r in rows:
            o = next((o for o in oracle if o["dataset"] == r["dataset"] and o["method"] == r["method"]), {})
            ci = o.get("paired_ci") or (None, None)
            w.writerow({**r, "oracle_budget": o.get("oracle_budget"),
                        "oracle_ms_per_token": o.get("oracle_ms_per_token"), "ratio_to_oracle": o.get("ratio"),
                        "paired_ratio_to_oracle": o.get("paired_ratio"), "paired_ci_low": ci[0],
                        "paired_ci_high": ci[1], "pooled_oracle_budget": o.get("pooled_oracle_budget"),
                        "pooled_ratio_to_oracle": o.get("pooled_ratio"),
                        "priced_oracle_budget": o.get("priced_oracle_budget"),
                        "priced_ratio_to_oracle": o.get("priced_ratio")})
    return text
