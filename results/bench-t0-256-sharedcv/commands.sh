#!/bin/bash
# The exact commands of this run (2-core CPU machine, one part per core, then the combined summary).
# Rerunning this script resumes the run where it stopped. Run from the repository root with the venv on PATH.
export OMP_NUM_THREADS=1
# cost profile first: the shared verify cost and the mix drafter's C_d (the lookup drafter's C_d is timed by the
# bench on first use, on the same verify measurement); the other core was busy during it, as during the run
taskset -c 0 caddtree profile --drafter dflash+lookup --threads 1 --preset coarse
ARGS="--drafter dflash+lookup --threads 1 --datasets gsm8k,math500,humaneval,mbpp \
  --methods ar,ddtree:4,8,caddtree,caddtree@nogate,lookup-caddtree --num-prompts 3 \
  --max-new-tokens 256 --temperature 0 --out results/bench-t0-256-sharedcv"
taskset -c 0 caddtree bench $ARGS --part 1/2 &
taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
