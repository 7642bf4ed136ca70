"""For a run without `ar`: how many of its outputs are identical to plain decoding of the same prompts and settings
in another run (`caddtree.bench.identical_to_plain`).
Run from the repository root, e.g. python scripts/exact_vs_plain.py results/bench-intel-monofit PLAIN_RUN_DIR
(bench-intel-monofit's plain decoding is in results/bench-t0-256-n20 at commit 325a14a:
`git checkout 325a14a -- results/bench-t0-256-n20`)"""
import sys

from caddtree.bench import identical_to_plain, load_records

run, plain_run = sys.argv[1], sys.argv[2]
recs = [r for r in load_records(run) if "ms_per_token" in r]
print(f"{run}: outputs identical to plain decoding ({plain_run}): {identical_to_plain(recs, plain_run)}/{len(recs)}")
