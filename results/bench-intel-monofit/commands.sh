#!/bin/bash
# A/B of the C_v fit on a 2-core Intel Xeon (AVX-512, no AMX): CaDDTree on the convex fit with per-pass jumps
# (`caddtree@passes`, the default before this run) against the monotone fit of the same measurements
# (`caddtree@mono`), beside fixed budgets 4 and 8; mix drafter, 8 sets x 8 prompts, 256 tokens, greedy. Code of
# 8c65183, 07:16-07:49 UTC 2026-12-02. Core 0 only (profile, then bench) while core 1 generated drafter data. Run in
# two steps: the first four sets on cost_model.first4.json, the other four on cost_model.json (C_d re-timed when the
# cached profile was refitted monotone). No `ar`: exactness against bench-t0-256-n20's plain decoding (at 325a14a):
# python scripts/exact_vs_plain.py results/bench-intel-monofit results/bench-t0-256-n20
export OMP_NUM_THREADS=1
taskset -c 0 caddtree profile --drafter dflash+lookup --threads 1 --preset coarse 2>&1 | tail -3
ARGS="--drafter dflash+lookup --threads 1 --datasets humaneval,mbpp,gsm8k,math500,aime25,livecodebench,mt_bench,alpaca \
  --methods ddtree:4,8,caddtree@passes,caddtree@mono --num-prompts 8 --max-new-tokens 256 --temperature 0 \
  --out results/bench-intel-monofit"
taskset -c 0 caddtree bench $ARGS
caddtree bench $ARGS --report
