#!/bin/bash
# The paper's robustness ablation with the shipped code, on the machine of results/bench-amd512-shipped/ (2-core AMD
# EPYC, AVX-512), with the cost profile it measured first (the copy in this directory; see
# results/bench-amd512-shipped/README.md): CaDDTree with the cost model perturbed (--perturb: C_d scaled by 0.5 and 2,
# the C_v slope in n by 0.5 and 2) beside the unperturbed one, the fixed 5-node tree and plain decoding; GSM8K and
# HumanEval x 8 prompts, 256 new tokens, greedy. Two processes, one per core, then the summary. Run from the
# repository root with the venv on PATH.
# As run, --cost-model named results/bench-amd512-shipped/cost_model.json, which then held this same profile.
export OMP_NUM_THREADS=1
export CADDTREE_CPU_KERNEL=panel
OUT=${OUT:-results/bench-amd512-perturb}
ARGS="--drafter dflash+lookup --threads 1 --datasets gsm8k,humaneval --methods ar,ddtree:5,caddtree --perturb \
  --num-prompts 8 --max-new-tokens 256 --temperature 0 \
  --cost-model results/bench-amd512-perturb/cost_model.json --out $OUT"
taskset -c 0 caddtree bench $ARGS --part 1/2 &
taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
