#!/bin/bash
# results/bench-t0-256-oneproc again, 5 prompts per set (the first 5 of its 10), after its profile had been taken
# under a burst of load (a 4-node verify priced 18% over a 5-node one): with the profile's extra sweeps while its
# medians look disturbed (caddtree/profile.py). One bench process, the other core idle; profile taken the same way.
# Rerunning this script resumes the run where it stopped. Run from the repository root with the venv on PATH.
export OMP_NUM_THREADS=1
export CADDTREE_CPU_KERNEL=panel
taskset -c 0 caddtree profile --drafter dflash+lookup --threads 1 --preset coarse
ARGS="--drafter dflash+lookup --threads 1 --datasets math500,gsm8k,aime25,humaneval,mbpp,livecodebench,mt_bench,alpaca \
  --methods ar,ddtree:4,5,8,caddtree --num-prompts 5 --max-new-tokens 256 --temperature 0 \
  --out results/bench-t0-256-oneproc2"
taskset -c 0 caddtree bench $ARGS
