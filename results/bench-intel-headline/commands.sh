#!/bin/bash
# Plain decoding, fixed budgets 4/5/8 and CaDDTree (mix drafter, phase-5 DFlash drafter, monotone C_v fit), 8 sets x
# 10 prompts, 256 tokens, greedy, on a 2-core Intel Xeon (AVX-512, no AMX). Code 8c65183, 07:49-08:44 UTC 2026-12-02.
# One bench process on core 0 while core 1 generated drafter training data; the cost model is the cached one of
# bench-intel-monofit's second half (its copy: cost_model.json). Not the two-core recipe: one process, no --part.
# Table: python scripts/headline_table.py results/bench-intel-headline
export OMP_NUM_THREADS=1
ARGS="--drafter dflash+lookup --threads 1 --datasets math500,gsm8k,aime25,humaneval,mbpp,livecodebench,mt_bench,alpaca \
  --methods ar,ddtree:4,5,8,caddtree --num-prompts 10 --max-new-tokens 256 --temperature 0 \
  --out results/bench-intel-headline"
taskset -c 0 caddtree bench $ARGS
caddtree bench $ARGS --report
