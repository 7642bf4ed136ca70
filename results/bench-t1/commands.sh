#!/bin/bash
# Temperature 1 (sampling): 4 datasets x 4 prompts, 128 new tokens, one part per core, then the combined summary.
# Rerunning this script resumes the run where it stopped.
ARGS="--drafter dflash+lookup --threads 1 --datasets gsm8k,math500,humaneval,mt_bench \
  --methods ar,caddtree,dflash-caddtree,lookup-caddtree,hf,llamacpp --num-prompts 4 \
  --max-new-tokens 128 --temperature 1 --seed 0 --out results/bench-t1"
OMP_NUM_THREADS=1 taskset -c 0 caddtree bench $ARGS --part 1/2 &
OMP_NUM_THREADS=1 taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
