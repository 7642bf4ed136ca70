"""The README's headline table from this run's summary.csv (run `caddtree bench ... --report` first).
Run from the repository root: python results/bench-t0-256-phase4/table.py"""
import csv
from pathlib import Path

rows = list(csv.DictReader(open(Path(__file__).parent / "summary.csv")))
by = {(r["dataset"], r["method"]): r for r in rows}


def ms(ds, m):
    r = by.get((ds, m))
    if r is None or not r["ms_per_token"]:
        return "–"
    return f"{float(r['ms_per_token']):.1f} ({float(r['speedup']):.2f}×)"


def tree(ds, m):
    r = by[(ds, m)]
    share = f", DFlash in {100 * float(r['second_stage_share']):.0f}% of rounds" if r["second_stage_share"] else ""
    return f"τ {float(r['tau']):.2f}, {float(r['tree_size_mean']):.1f} nodes{share}"


print("| dataset | n | plain (ar) | HF generate | HF prompt lookup "
      "| best fixed budget, mix (oracle) | CaDDTree, mix + gate | CaDDTree / oracle: medians; per prompt [90% CI] "
      "| CaDDTree, prompt lookup "
      "| exact match (our 5 speculative methods) |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for ds in dict.fromkeys(r["dataset"] for r in rows):
    c = by[(ds, "caddtree")]
    oracle_b = c["oracle_budget"]
    oracle = f"{float(c['oracle_ms_per_token']):.1f} (B={oracle_b}, " \
             f"{float(by[(ds, 'ar')]['ms_per_token']) / float(c['oracle_ms_per_token']):.2f}×)"
    ratio = f"{float(c['ratio_to_oracle']):.3f}; {float(c['paired_ratio_to_oracle']):.3f} " \
            f"[{float(c['paired_ci_low']):.2f}, {float(c['paired_ci_high']):.2f}]"
    ours = [r for r in rows if r["dataset"] == ds and r["compared"]
            and r["method"] not in ("ar", "hf", "hf-lookup")]
    exact = f"{sum(int(r['match']) for r in ours)}/{sum(int(r['compared']) for r in ours)}"
    print(f"| {ds} | {by[(ds, 'ar')]['n']} | {float(by[(ds, 'ar')]['ms_per_token']):.1f} | {ms(ds, 'hf')} | "
          f"{ms(ds, 'hf-lookup')} | {oracle} | {ms(ds, 'caddtree')}, {tree(ds, 'caddtree')} | "
          f"{ratio} | "
          f"{ms(ds, 'lookup-caddtree')}, {tree(ds, 'lookup-caddtree')} | {exact} |")
