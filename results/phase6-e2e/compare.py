"""Phase 6 against phase 5 in results/phase6-e2e: per method, τ and ms/token pooled over all prompts, and the
per-prompt ratio phase 6 / phase 5 (median, geometric mean, prompts where phase 6 was faster), per set and overall.
Run from the repository root: python results/phase6-e2e/compare.py"""
import numpy as np

from caddtree.bench import load_records

runs = {p: [r for r in load_records(f"results/phase6-e2e/{p}") if "ms_per_token" in r] for p in ("phase5", "phase6")}
print("| set | method | τ phase 5 | τ phase 6 | ms/token phase 5 (pooled) | phase 6 | per-prompt ratio 6/5: median, gm | phase 6 faster |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
for ds in ["gsm8k", "math500", "humaneval", "mbpp", "all"]:
    for m in ("ddtree:5", "caddtree"):
        by = {p: {str(r["prompt_id"]) + r["dataset"]: r for r in rs if r["method"] == m and ds in ("all", r["dataset"])}
              for p, rs in runs.items()}
        keys = sorted(set(by["phase5"]) & set(by["phase6"]))
        tau = {p: sum(by[p][k]["new_tokens"] for k in keys) / sum(by[p][k]["rounds"] for k in keys) for p in by}
        ms = {p: sum(by[p][k]["decode_ms"] for k in keys) / sum(by[p][k]["new_tokens"] for k in keys) for p in by}
        ratio = np.array([by["phase6"][k]["ms_per_token"] / by["phase5"][k]["ms_per_token"] for k in keys])
        print(f"| {ds} | {m} | {tau['phase5']:.2f} | {tau['phase6']:.2f} | {ms['phase5']:.1f} | {ms['phase6']:.1f} | "
              f"{np.median(ratio):.3f}, {np.exp(np.log(ratio).mean()):.3f} | {int((ratio < 1).sum())}/{len(keys)} |")
