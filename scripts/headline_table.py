"""The README's headline table from a run's summary.csv (run `caddtree bench ... --report` first); the peer columns
(HF generate, HF prompt lookup, llama.cpp), CaDDTree with prompt lookup and CaDDTree without the draft gate
(`caddtree@nogate`) appear where the run has them, plain decoding on fp32 weights (`ar-fp32`) too, and with llama.cpp
the ratios of plain decoding's and CaDDTree's medians to its. With --short: only plain decoding, the peers, the best
fixed budget, CaDDTree, their ratio (medians) and the exact-match count (the top-level README's tables).
Run from the repository root: python scripts/headline_table.py results/bench-amd512-shipped [--short]"""
import csv
import sys
from pathlib import Path

short = "--short" in sys.argv[2:]
rows = list(csv.DictReader(open(Path(sys.argv[1]) / "summary.csv")))
by = {(r["dataset"], r["method"]): r for r in rows}
PEERS = {"hf": "HF generate", "hf-lookup": "HF prompt lookup", "llamacpp": "llama.cpp (Q4_1)"}
peers = [m for m in PEERS if any(r["method"] == m for r in rows)]
lookup = not short and any(r["method"] == "lookup-caddtree" for r in rows)
nogate = not short and any(r["method"] == "caddtree@nogate" for r in rows)
fp32 = any(r["method"] == "ar-fp32" for r in rows)
vs_llama = "llamacpp" in peers


def ms(ds, m):
    r = by.get((ds, m))
    if r is None or not r["ms_per_token"]:
        return "–"
    return f"{float(r['ms_per_token']):.1f} ({float(r['speedup']):.2f}×)"


def tree(ds, m):
    r = by[(ds, m)]
    share = f", DFlash in {100 * float(r['second_stage_share']):.0f}% of rounds" if r["second_stage_share"] else ""
    return f"τ {float(r['tau']):.2f}, {float(r['tree_size_mean']):.1f} nodes{share}"


ratio_head = "CaDDTree / best fixed" if short else "CaDDTree / oracle: medians; per prompt [90% CI]"
header = (["dataset", "n", "plain (ar)"] + (["plain, fp32 weights"] if fp32 else []) + [PEERS[m] for m in peers]
          + ["best fixed budget, mix (oracle)", "CaDDTree, mix + gate", ratio_head]
          + (["CaDDTree, mix, no gate (/ oracle: medians)"] if nogate else [])
          + (["CaDDTree, prompt lookup"] if lookup else [])
          + (["plain / llama.cpp", "CaDDTree / llama.cpp"] if vs_llama else [])
          + ["exact match (all our methods vs plain)"])
print("| " + " | ".join(header) + " |")
print("|---|" + "---:|" * (len(header) - 1))
for ds in dict.fromkeys(r["dataset"] for r in rows):
    ar, c = by[(ds, "ar")], by[(ds, "caddtree")]
    oracle = f"{float(c['oracle_ms_per_token']):.1f} (B={c['oracle_budget']}, " \
             f"{float(ar['ms_per_token']) / float(c['oracle_ms_per_token']):.2f}×)"
    ratio = f"{float(c['ratio_to_oracle']):.3f}" + ("" if short else
                                                    f"; {float(c['paired_ratio_to_oracle']):.3f} "
                                                    f"[{float(c['paired_ci_low']):.2f}, {float(c['paired_ci_high']):.2f}]")
    ours = [r for r in rows if r["dataset"] == ds and r["compared"] and r["method"] not in ("ar", *PEERS)]
    exact = f"{sum(int(r['match']) for r in ours)}/{sum(int(r['compared']) for r in ours)}"
    llama = float(by[(ds, "llamacpp")]["ms_per_token"]) if vs_llama else None
    cells = ([ds, ar["n"], f"{float(ar['ms_per_token']):.1f}"] + ([ms(ds, "ar-fp32")] if fp32 else [])
             + [ms(ds, m) for m in peers]
             + [oracle, ms(ds, 'caddtree') if short else f"{ms(ds, 'caddtree')}, {tree(ds, 'caddtree')}", ratio]
             + ([f"{ms(ds, 'caddtree@nogate')}, {tree(ds, 'caddtree@nogate')} "
                 f"({float(by[(ds, 'caddtree@nogate')]['ratio_to_oracle']):.3f})"] if nogate else [])
             + ([f"{ms(ds, 'lookup-caddtree')}, {tree(ds, 'lookup-caddtree')}"] if lookup else [])
             + ([f"{float(ar['ms_per_token']) / llama:.2f}", f"{float(c['ms_per_token']) / llama:.2f}"]
                if vs_llama else []) + [exact])
    print("| " + " | ".join(cells) + " |")
