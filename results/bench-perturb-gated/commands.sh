#!/bin/bash
# The exact commands of this run (2-core CPU machine, one part per core, then the combined summary).
# Rerunning this script resumes the run where it stopped. Run from the repository root with the venv on PATH.
# The cost profile was the cached one of results/bench-t1-gated (`caddtree profile --drafter dflash+lookup`, 20:49 UTC).
export OMP_NUM_THREADS=1
ARGS="--drafter dflash+lookup --threads 1 --datasets gsm8k,math500 --methods ar,caddtree --perturb \
  --num-prompts 4 --max-new-tokens 256 --temperature 0 --out results/bench-perturb-gated"
taskset -c 0 caddtree bench $ARGS --part 1/2 &
taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
