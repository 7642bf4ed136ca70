#!/bin/bash
# CaDDTree pricing verifies with C_v learned from its own rounds (`caddtree@learn`, costmodel.LearnedVerifyCost)
# against the shipped CaDDTree on the profile alone, back to back on each prompt, with the fixed budgets 4 / 5 / 8 for
# the oracle: the three code / word-problem sets where CaDDTree was over the oracle, and MT-Bench; 12 prompts each
# (the first 12 of results/zen5-lean/), 256 new tokens, greedy, --repeats 2, a fresh coarse profile measured first
# (both cores busy), one process per core. Run from the repository root with the venv on PATH.
export OMP_NUM_THREADS=1 CADDTREE_CPU_KERNEL=panel
OUT=${OUT:-results/zen5-learn}
if ! ls "$OUT"/records*.jsonl >/dev/null 2>&1; then  # a resumed run keeps the profile it started with
  taskset -c 0 caddtree profile --drafter dflash+lookup --threads 1 --preset coarse &
  taskset -c 1 caddtree profile --drafter lookup --threads 1 --preset coarse &
  wait
fi
ARGS="--drafter dflash+lookup --threads 1 --datasets mbpp,gsm8k,humaneval,mt_bench \
  --methods ddtree:4,5,8,caddtree,caddtree@learn --num-prompts 12 --max-new-tokens 256 --temperature 0 --repeats 2 --out $OUT"
taskset -c 0 caddtree bench $ARGS --part 1/2 &
taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
