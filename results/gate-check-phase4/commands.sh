#!/bin/bash
# GSM8K and HumanEval, the two sets where CaDDTree lost to the fixed 4-node tree in results/bench-t0-256-phase4, on 20
# further prompts (10-29) on the same machine (2-core AMD EPYC with AVX-512, panel kernel, phase-4 drafter, the cached
# cost profiles of that run): fixed 4- and 5-node mix trees (5 nodes + the root = 6 rows, the most one pass of the
# panel kernel covers), CaDDTree with and without the draft gate. One part per core, then the combined summary.
# Rerunning this script resumes the run where it stopped. Run from the repository root with the venv on PATH.
export OMP_NUM_THREADS=1
export CADDTREE_CPU_KERNEL=panel
ARGS="--drafter dflash+lookup --threads 1 --datasets gsm8k,humaneval --methods ar,ddtree:4,5,caddtree,caddtree@nogate \
  --first-prompt 10 --num-prompts 20 --max-new-tokens 256 --temperature 0 --out results/gate-check-phase4"
taskset -c 0 caddtree bench $ARGS --part 1/2 &
taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
