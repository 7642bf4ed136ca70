#!/bin/bash
# A measured check of the shipped code after the prompt lookup's per-length calibration (results/lookup-by-length/)
# on the two code sets where the headline (results/bench-amd-gatereset/) missed the targets: MBPP and HumanEval,
# the headline's first 12 prompts each, plain decoding, the fixed 5-node tree and CaDDTree, the headline's cost
# profile; two bench processes, one per core, then the summary. Run from the repository root with the venv on PATH.
export OMP_NUM_THREADS=1
export CADDTREE_CPU_KERNEL=panel
ARGS="--drafter dflash+lookup --threads 1 --datasets humaneval,mbpp --methods ar,ddtree:5,caddtree --num-prompts 12 \
  --max-new-tokens 256 --temperature 0 --cost-model results/bench-amd-headline/cost_model.json \
  --out results/bench-amd-lookuplen-code"
taskset -c 0 caddtree bench $ARGS --part 1/2 &
taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
