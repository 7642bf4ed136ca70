#!/bin/bash
# 256 new tokens on the math and code sets: 4 datasets x 6 prompts (first run 4, then extended to 6), greedy, plain vs fixed 8-node tree and CaDDTree
# (mix drafter) and CaDDTree with prompt lookup. One part per core, then the combined summary (rerun: resumes).
ARGS="--drafter dflash+lookup --threads 1 --datasets math500,gsm8k,humaneval,mbpp \
  --methods ar,ddtree:8,caddtree,lookup-caddtree --num-prompts 6 --max-new-tokens 256 --temperature 0 \
  --out results/bench-t0-256"
OMP_NUM_THREADS=1 taskset -c 0 caddtree bench $ARGS --part 1/2 &
OMP_NUM_THREADS=1 taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
