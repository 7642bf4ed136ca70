#!/bin/bash
# Sampling (temperature 1) with the shipped code on the machine of results/bench-amd512-shipped/ (2-core AMD EPYC,
# AVX-512), right after that run and with the cost profile it measured first (the copy in this directory; see
# results/bench-amd512-shipped/README.md): 4 sets x 8 prompts, 256 new tokens, seed 0; plain decoding, the fixed
# 5-node tree, CaDDTree and CaDDTree without the draft gate, all with the mix drafter. Outputs differ from plain
# decoding's by design (each method draws its own sample; the law is the same: the chi-square tests in
# tests/test_engine.py), so there is no exact-match column. Two processes, one per core, then the summary. Run from
# the repository root with the venv on PATH.
# As run, --cost-model named results/bench-amd512-shipped/cost_model.json, which then held this same profile.
export OMP_NUM_THREADS=1
export CADDTREE_CPU_KERNEL=panel
OUT=${OUT:-results/bench-amd512-t1}
ARGS="--drafter dflash+lookup --threads 1 --datasets gsm8k,math500,humaneval,mt_bench \
  --methods ar,ddtree:5,caddtree,caddtree@nogate --num-prompts 8 --max-new-tokens 256 --temperature 1 \
  --cost-model results/bench-amd512-t1/cost_model.json --out $OUT"
taskset -c 0 caddtree bench $ARGS --part 1/2 &
taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
