"""Each round's measured verify time against the price of cost profiles, by tree size: per size n, the median over
rounds of measured ms / C_v(n; ℓ) at the round's ℓ (all methods' rounds pooled), and the measured ms at ℓ ≈ 256.
Usage (repository root): python results/zen5-profile-ab2/by_size.py RUN_DIR PROFILE.json [PROFILE.json ...]"""
import statistics
import sys
from collections import defaultdict

from caddtree.bench import load_records
from caddtree.costmodel import load_cost_model

run, paths = sys.argv[1], sys.argv[2:]
models = [load_cost_model(p) for p in paths]
rounds = defaultdict(list)  # n -> [(ℓ, measured ms)]
for r in load_records(run):
    if not r.get("verify_ms_rounds"):
        continue
    ctx = r["prompt_len"] - 1
    for n, a, ms in zip(r["tree_sizes"], r["accepted"], r["verify_ms_rounds"]):
        rounds[n].append((ctx, ms))
        ctx += a + 1
print("| n | rounds | measured ms, ℓ 200-320 (median) | " + " | ".join(f"measured / priced, {p}" for p in paths) + " |")
print("|---:|---:|---:|" + "---:|" * len(paths))
for n in sorted(rounds):
    rs = rounds[n]
    if len(rs) < 20:
        continue
    mid = [ms for c, ms in rs if 200 <= c <= 320]
    ratios = [statistics.median(ms / m.verify_ms(n, c) for c, ms in rs) for m in models]
    print(f"| {n} | {len(rs)} | {statistics.median(mid) if mid else float('nan'):.1f} | "
          + " | ".join(f"{x:.3f}" for x in ratios) + " |")
