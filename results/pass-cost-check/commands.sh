#!/bin/bash
# The per-pass verify cost (CostModel.row_group / pass_ms) against the convex-only fit of the same measurements, on
# the prompts of results/gate-check-phase4 (GSM8K and HumanEval, prompts 10-29), same machine (2-core AMD EPYC with
# AVX-512), panel kernel, phase-4 drafter: fixed 4- and 5-node trees, CaDDTree (pass-aware, the default now) and
# caddtree@convex (the convex fit without the pass term: CaDDTree as it was). Profiles first (both cores busy, as
# in the run), then one part per core, then the combined summary. Rerunning this script resumes the run where it
# stopped. Run from the repository root with the venv on PATH.
export OMP_NUM_THREADS=1
export CADDTREE_CPU_KERNEL=panel
taskset -c 0 caddtree profile --drafter dflash+lookup --threads 1 --preset coarse &
taskset -c 1 caddtree profile --drafter lookup --threads 1 --preset coarse &
wait
ARGS="--drafter dflash+lookup --threads 1 --datasets gsm8k,humaneval --methods ar,ddtree:4,5,caddtree,caddtree@convex \
  --first-prompt 10 --num-prompts 20 --max-new-tokens 256 --temperature 0 --out results/pass-cost-check"
taskset -c 0 caddtree bench $ARGS --part 1/2 &
taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
