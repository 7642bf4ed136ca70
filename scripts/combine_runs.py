"""Runs of the same bench command (same prompts, methods, options) as one: per prompt and method the fastest of all
their runs (each run's record already the fastest of its --repeats), summarised as `caddtree bench --report` does
(no priced column: the runs priced with different profiles). Writes summary.md and summary.csv into OUT_DIR (then
`python scripts/headline_table.py OUT_DIR`) and prints CaDDTree / each fixed budget per prompt over all prompts.
Run from the repository root: python scripts/combine_runs.py OUT_DIR RUN_DIR RUN_DIR [...]"""
import sys
from pathlib import Path

from caddtree.bench import load_records, paired_ratio, summarize, write_summary

out, runs = Path(sys.argv[1]), sys.argv[2:]
best = {}
for run in runs:
    for r in load_records(run):
        if "ms_per_token" not in r or r.get("error"):
            continue
        key = (r["dataset"], r["method"], str(r["prompt_id"]), r["config"])
        kept = best.get(key)
        if kept is not None and r["tokens"] != kept["tokens"]:
            raise SystemExit(f"{key}: the runs' outputs differ")
        runs_ms = (kept or {}).get("ms_per_token_runs", []) + r.get("ms_per_token_runs", [r["ms_per_token"]])
        if kept is None or r["ms_per_token"] < kept["ms_per_token"]:
            kept = r
        best[key] = {**kept, "ms_per_token_runs": runs_ms}
records = list(best.values())
n = max(len(r["ms_per_token_runs"]) for r in records)
out.mkdir(parents=True, exist_ok=True)
header = (f"# {len(runs)} bench runs as one\n\n{', '.join(f'`{r}`' for r in runs)}: per prompt and method the "
          f"fastest of their {n} runs (`python scripts/combine_runs.py {out} {' '.join(runs)}`); ms/token, speed-up "
          "and oracle as in each run's summary.md.\n")
print(write_summary(summarize(records), out, header))
pooled = [{**r, "dataset": "all", "prompt_id": f"{r['dataset']}/{r['prompt_id']}"} for r in records]
for b in sorted({r["method"] for r in records if r["method"].startswith("ddtree")}, key=lambda m: int(m.split(":")[1])):
    p = paired_ratio(pooled, "all", "caddtree", b)
    print(f"caddtree / {b} per prompt over all prompts: {p['paired_ratio']:.3f} "
          f"[{p['paired_ci'][0]:.3f}, {p['paired_ci'][1]:.3f}], faster on {p['paired_faster']}")
