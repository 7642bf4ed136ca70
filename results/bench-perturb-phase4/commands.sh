#!/bin/bash
# Robustness ablation with the phase-4 drafter: CaDDTree (mix + gate) with C_d or the C_v slope scaled by 0.5 and 2
# (`--perturb`), on the machine of results/bench-t0-256-phase4 (2-core AMD EPYC with AVX-512, panel kernel), on its
# cached cost profiles. As results/bench-perturb-gated, with 8 prompts per set instead of 4.
# One part per core, then the combined summary. Rerunning this script resumes the run where it stopped.
# Run from the repository root with the venv on PATH.
export OMP_NUM_THREADS=1
export CADDTREE_CPU_KERNEL=panel
ARGS="--drafter dflash+lookup --threads 1 --datasets gsm8k,math500 --methods ar,caddtree --perturb \
  --num-prompts 8 --max-new-tokens 256 --temperature 0 --out results/bench-perturb-phase4"
taskset -c 0 caddtree bench $ARGS --part 1/2 &
taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
