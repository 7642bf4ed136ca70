"""Per-prompt ms/token ratios of this run (methods ran back to back on each prompt): median, 90% bootstrap interval
of the median, prompts faster (`caddtree.bench.paired_ratio`), and the share of rounds that ran the DFlash stage.
Run from the repository root: python results/gate-realised/compare.py > results/gate-realised/compare.md"""
import glob
import json
from pathlib import Path

from caddtree.bench import paired_ratio

here = Path(__file__).parent
recs = [json.loads(x) for f in sorted(glob.glob(str(here / "records*.jsonl"))) for x in open(f)]
recs = [r for r in recs if "ms_per_token" in r and not r.get("error")]
pairs = [("caddtree", "caddtree@predgate"), ("caddtree", "lookup-caddtree"), ("caddtree@predgate", "lookup-caddtree")]
print("| dataset | " + " | ".join(f"{a} / {b}" for a, b in pairs) + " | DFlash rounds: realised gate / predicted gate "
      "| exact (all methods) |")
print("|---|" + "---:|" * (len(pairs) + 2))
for ds in dict.fromkeys(r["dataset"] for r in recs):
    cells = []
    for a, b in pairs:
        p = paired_ratio(recs, ds, a, b)
        ci = p["paired_ci"]
        cells.append(f"{p['paired_ratio']:.3f} [{ci[0]:.2f}, {ci[1]:.2f}] ({p['paired_faster']}/{p['paired_n']} faster)"
                     if ci else f"{p['paired_ratio']:.3f} (n {p['paired_n']})")
    share = {}
    for m in ("caddtree", "caddtree@predgate"):
        rs = [r for r in recs if r["dataset"] == ds and r["method"] == m]
        ran, rounds = sum(r["second_stage_rounds"] for r in rs), sum(r["rounds"] for r in rs)
        share[m] = f"{100 * ran / rounds:.0f}%" if rounds else "–"
    ours = [r for r in recs if r["dataset"] == ds and r.get("match_ar") is not None]
    exact = f"{sum(bool(r['match_ar']) for r in ours)}/{len(ours)}"
    print(f"| {ds} | " + " | ".join(cells) + f" | {share['caddtree']} / {share['caddtree@predgate']} | {exact} |")
