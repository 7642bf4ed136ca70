#!/bin/bash
# The exact commands of this run (2-core CPU machine, one part per core, then the combined summary).
# Rerunning this script resumes the run where it stopped. Run from the repository root with the venv on PATH.
export OMP_NUM_THREADS=1
# cost profile first: the shared verify cost and the mix drafter's C_d (the lookup drafter's C_d is timed by the
# bench on first use, on the same verify measurement); the other core was busy during it, as during the run
taskset -c 0 caddtree profile --drafter dflash+lookup --threads 1 --preset coarse
ARGS="--drafter dflash+lookup --threads 1 --datasets gsm8k,math500,humaneval,mt_bench \
  --methods ar,caddtree,caddtree@nogate,lookup-caddtree,hf,llamacpp --num-prompts 4 \
  --max-new-tokens 128 --temperature 1 --out results/bench-t1-gated"
taskset -c 0 caddtree bench $ARGS --part 1/2 &
taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
