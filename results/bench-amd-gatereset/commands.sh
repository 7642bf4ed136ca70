#!/bin/bash
# Plain decoding, fixed budgets 3/5/8 and CaDDTree (mix drafter, the gate reset per generation), 8 sets x 12 prompts,
# 256 tokens, greedy, on a 2-core AMD EPYC with AVX2 and no AVX-512. Code 3a93da7, 14:05-15:10 UTC 2026-12-02. As
# run, --cost-model named results/bench-amd-headline/cost_model.json (removed; at commit 325a14a), byte-identical to
# the copy here.
exec scripts/two_core_bench.sh "${OUT:-results/bench-amd-gatereset}" - -- \
  --drafter dflash+lookup --threads 1 --datasets math500,gsm8k,aime25,humaneval,mbpp,livecodebench,mt_bench,alpaca \
  --methods ar,ddtree:3,5,8,caddtree --num-prompts 12 --max-new-tokens 256 --temperature 0 \
  --cost-model results/bench-amd-gatereset/cost_model.json
