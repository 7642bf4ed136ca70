"""AMX kernel against the panel kernel, prompt by prompt: the two runs ran at the same time, one per core, on the
same prompts. Per method: median ms/token of each run, the per-prompt ratio amx / panel (median, 90% bootstrap
interval, prompts faster; `caddtree.bench.paired_ratio`), each run's speed-up over its own plain decoding, the AMX
run's speed-up over the *panel* run's plain decoding (the faster plain decoding), and whether each run's output equals
its own plain decoding. Run from the repository root:
python results/kernels-amx/compare.py > results/kernels-amx/compare.md"""
import json
from pathlib import Path

import numpy as np

from caddtree.bench import paired_ratio

here = Path(__file__).parent
runs = {}
for kind in ("panel", "amx"):
    recs = [json.loads(x) for x in open(here / kind / "records.jsonl")]
    runs[kind] = [r for r in recs if "ms_per_token" in r and not r.get("error")]
both = [{**r, "method": f"{r['method']}@{kind}"} for kind, recs in runs.items() for r in recs]


def values(kind, ds, method, key):
    return [r[key] for r in runs[kind] if r["dataset"] == ds and r["method"] == method]


def median_ms(kind, ds, method):
    return float(np.median(values(kind, ds, method, "ms_per_token")))


print("| dataset | method | ms/token panel | ms/token amx | per prompt amx / panel | speed-up vs own ar, panel → amx "
      "| amx vs panel's ar | τ panel → amx | tree size panel → amx | exact vs own ar (both runs) |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for ds in dict.fromkeys(r["dataset"] for r in runs["amx"]):
    for m in dict.fromkeys(r["method"] for r in runs["amx"] if r["dataset"] == ds):
        if not values("panel", ds, m, "ms_per_token"):
            continue
        p = paired_ratio(both, ds, f"{m}@amx", f"{m}@panel")
        ci = p["paired_ci"]
        cell = (f"{p['paired_ratio']:.3f} [{ci[0]:.2f}, {ci[1]:.2f}] ({p['paired_faster']}/{p['paired_n']} faster)"
                if ci else f"{p['paired_ratio']:.3f} (n {p['paired_n']})")
        panel, amx = median_ms("panel", ds, m), median_ms("amx", ds, m)
        own = " → ".join(f"{median_ms(k, ds, 'ar') / median_ms(k, ds, m):.2f}×" for k in ("panel", "amx"))
        best = median_ms("panel", ds, "ar") / amx
        tau = " → ".join(f"{np.median(values(k, ds, m, 'tau')):.2f}" for k in ("panel", "amx"))
        size = " → ".join(f"{np.mean(values(k, ds, m, 'tree_size_mean')):.1f}" for k in ("panel", "amx"))
        ours = [r for k in runs for r in runs[k] if r["dataset"] == ds and r["method"] == m]
        exact = sum(bool(r["match_ar"]) for r in ours if m != "ar")
        print(f"| {ds} | {m} | {panel:.1f} | {amx:.1f} | {cell} | {own} | {best:.2f}× | {tau} | {size} | "
              f"{exact if m != 'ar' else '–'}/{len(ours) if m != 'ar' else '–'} |")
