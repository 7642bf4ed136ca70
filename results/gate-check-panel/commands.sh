#!/bin/bash
# The two sets where CaDDTree was slower than the oracle fixed budget in results/bench-t0-256-panel (GSM8K, HumanEval):
# CaDDTree with the draft gate (default) and without it (`caddtree@nogate`, DFlash every round) against the fixed
# 4- and 8-node mix trees, back to back on the same 10 prompts, panel kernel, one part per core, then the summary.
export OMP_NUM_THREADS=1
ARGS="--drafter dflash+lookup --threads 1 --datasets gsm8k,humaneval --methods ddtree:4,8,caddtree,caddtree@nogate \
  --num-prompts 10 --max-new-tokens 256 --temperature 0 --out results/gate-check-panel"
taskset -c 0 caddtree bench $ARGS --part 1/2 &
taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
