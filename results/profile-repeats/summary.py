"""Spread of the fitted C_v at ctx 300 over the profiles of results/profile-repeats, per repeat count."""
import json
import statistics as st
from pathlib import Path

here = Path(__file__).parent
runs = [r for f in ("core0.json", "core1.json") for r in json.loads((here / f).read_text())]
print("| repeats | profiles | C_v(1) ms (min-max) | C_v(5) - C_v(1) | pass jump C_v(6) - C_v(5) |")
print("|---:|---:|---|---|---|")
for rep in (3, 9):
    cv = [r["cv300"] for r in runs if r["repeats"] == rep]
    one, slope, jump = [c[1] for c in cv], [c[5] - c[1] for c in cv], [c[6] - c[5] for c in cv]
    fmt = lambda v: f"{st.median(v):.1f} ({min(v):.1f}-{max(v):.1f})"  # noqa: E731
    print(f"| {rep} | {len(cv)} | {fmt(one)} | {fmt(slope)} | {fmt(jump)} |")
