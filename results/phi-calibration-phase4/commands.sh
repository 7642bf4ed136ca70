#!/bin/bash
# Φ calibration (caddtree@cal, budget.PhiCalibration) on the machine of results/bench-t0-256-phase4 (2-core AMD EPYC
# with AVX-512, panel kernel, phase-4 drafter, the cached cost profiles of that run), where CaDDTree's expected Φ was
# 4-25% under the accepted tokens (GSM8K 15%, HumanEval 3-10%) and its trees came out smaller than the fastest fixed
# tree (5 nodes): does calibrating Φ close that gap? GSM8K and HumanEval, prompts 10-29 (those of results/gate-check-phase4), back to back
# per prompt: plain, the fixed 5-node mix tree, CaDDTree as shipped and with Φ calibration. One part per core, then
# the combined summary. Rerunning this script resumes the run where it stopped. Run from the repository root with the
# venv on PATH.
export OMP_NUM_THREADS=1
export CADDTREE_CPU_KERNEL=panel
ARGS="--drafter dflash+lookup --threads 1 --datasets gsm8k,humaneval --methods ar,ddtree:5,caddtree,caddtree@cal \
  --first-prompt 10 --num-prompts 20 --max-new-tokens 256 --temperature 0 --out results/phi-calibration-phase4"
taskset -c 0 caddtree bench $ARGS --part 1/2 &
taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
