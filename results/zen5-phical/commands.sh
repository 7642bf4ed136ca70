#!/bin/bash
# Right after results/bench-zen5-online/, same machine, code and cached cost profile (no new profile): does pricing
# trees by calibrated Φ (`caddtree@cal`, budget.PhiCalibration) help on the three sets where CaDDTree lost to the
# oracle there (MBPP, GSM8K, HumanEval), whose 10+-node trees were accepted at 0.5-0.8x their expected length?
# 12 prompts per set (the first 12 of that run), fixed budgets 4 and 5, CaDDTree, CaDDTree@cal, all with the mix
# drafter; no `ar` (exactness against that run's plain decoding: results/exact_vs_plain.py). One process per core.
export OMP_NUM_THREADS=1
export CADDTREE_CPU_KERNEL=panel
OUT=${OUT:-results/zen5-phical}
ARGS="--drafter dflash+lookup --threads 1 --datasets mbpp,gsm8k,humaneval \
  --methods ddtree:4,5,caddtree,caddtree@cal --num-prompts 12 --max-new-tokens 256 --temperature 0 --out $OUT"
taskset -c 0 caddtree bench $ARGS --part 1/2 &
taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
