#!/bin/bash
# Robustness ablation: CaDDTree (mix drafter) with its cost model perturbed, C_d or the C_v slope in n scaled by
# 0.5 and 2 (--perturb adds caddtree@cd0.5,@cd2,@cv0.5,@cv2); 2 datasets x 6 prompts, 128 new tokens, greedy.
# One part per core, then the combined summary. Rerunning this script resumes the run where it stopped.
ARGS="--drafter dflash+lookup --threads 1 --datasets gsm8k,math500 --methods ar,caddtree --perturb \
  --num-prompts 6 --max-new-tokens 128 --temperature 0 --out results/bench-perturb-t0"
OMP_NUM_THREADS=1 taskset -c 0 caddtree bench $ARGS --part 1/2 &
OMP_NUM_THREADS=1 taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
