#!/bin/bash
# Right after results/zen5-phical/, same machine, code and cached cost profile (no new profile): the three sets over
# the oracle in results/bench-zen5-online/ (MBPP, GSM8K, HumanEval), its 30 prompts each, measured again with
# --repeats 2 (each prompt's methods run twice, the order reversed the second time, each record the faster run),
# to see whether the deficit survives less timing noise. Fixed budgets 4 and 5 (the oracles there), CaDDTree, all
# with the mix drafter; no `ar` (exactness against that run's plain decoding: results/exact_vs_plain.py).
# One process per core.
export OMP_NUM_THREADS=1
export CADDTREE_CPU_KERNEL=panel
OUT=${OUT:-results/zen5-repeats}
ARGS="--drafter dflash+lookup --threads 1 --datasets mbpp,gsm8k,humaneval --methods ddtree:4,5,caddtree \
  --num-prompts 30 --max-new-tokens 256 --temperature 0 --repeats 2 --out $OUT"
taskset -c 0 caddtree bench $ARGS --part 1/2 &
taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
