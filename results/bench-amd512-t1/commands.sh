#!/bin/bash
# Temperature 1, seed 0: plain decoding, B=5, CaDDTree, CaDDTree without the gate, mix drafter; GSM8K, MATH-500,
# HumanEval, MT-Bench x 8 prompts, 256 tokens. Machine of bench-amd512-shipped, code c418396, 20:39-20:51 UTC
# 2026-12-02, that run's first profile (as run, --cost-model named results/bench-amd512-shipped/cost_model.json,
# which then held this copy). Each method draws its own sample: no exact-match column.
exec scripts/two_core_bench.sh "${OUT:-results/bench-amd512-t1}" - -- \
  --drafter dflash+lookup --threads 1 --datasets gsm8k,math500,humaneval,mt_bench \
  --methods ar,ddtree:5,caddtree,caddtree@nogate --num-prompts 8 --max-new-tokens 256 --temperature 1 \
  --cost-model results/bench-amd512-t1/cost_model.json
