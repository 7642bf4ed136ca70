"""Per-prompt ratios of results/onepass-check (median and geometric mean per set and over all prompts)."""
import json
import math
import statistics as st
from pathlib import Path

here = Path(__file__).parent
recs = [r for f in ("core0.json", "core1.json") for r in json.loads((here / f).read_text())]
gm = lambda v: math.exp(st.mean(map(math.log, v)))  # noqa: E731
print("| set | prompts | caddtree / onepass | caddtree / ddtree:5 | onepass / ddtree:5 | τ caddtree, onepass, ddtree:5 |")
print("|---|---:|---|---|---|---|")
for ds in sorted({r["ds"] for r in recs}) + ["all"]:
    rs = [r for r in recs if ds in ("all", r["ds"])]
    cells = []
    for a, b in (("caddtree", "onepass"), ("caddtree", "ddtree:5"), ("onepass", "ddtree:5")):
        v = [r[a] / r[b] for r in rs]
        cells.append(f"median {st.median(v):.3f}, gm {gm(v):.3f}")
    tau = ", ".join(f"{st.mean(r[m + '_tau'] for r in rs):.2f}" for m in ("caddtree", "onepass", "ddtree:5"))
    print(f"| {ds} | {len(rs)} | " + " | ".join(cells) + f" | {tau} |")
