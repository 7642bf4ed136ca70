#!/bin/bash
# The paper's robustness ablation: CaDDTree with C_d or the C_v slope in n scaled by 0.5 and 2 (--perturb) beside
# CaDDTree, B=5 and plain decoding; GSM8K, HumanEval x 8 prompts, 256 tokens, greedy. Machine of bench-amd512-shipped,
# code c418396, 20:51-20:58 UTC 2026-12-02, that run's first profile (as run, --cost-model named
# results/bench-amd512-shipped/cost_model.json, which then held this copy).
exec scripts/two_core_bench.sh "${OUT:-results/bench-amd512-perturb}" - -- \
  --drafter dflash+lookup --threads 1 --datasets gsm8k,humaneval --methods ar,ddtree:5,caddtree --perturb \
  --num-prompts 8 --max-new-tokens 256 --temperature 0 \
  --cost-model results/bench-amd512-perturb/cost_model.json
