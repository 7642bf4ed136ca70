#!/bin/bash
# The README's headline: plain decoding, fixed budgets 3/4/5/8, CaDDTree and CaDDTree without the draft gate, mix
# drafter (DFlash + prompt lookup), 8 sets x 30 prompts, 256 tokens, greedy; 2-core AMD EPYC with AVX-512 (family
# 25 model 17). Code c418396; 2026-12-02, prompts 1-12 19:56-20:39 UTC (with the profiles), 13-20 21:22-21:51 and
# 21-30 22:21-22:50 (bench and --report only, the cached profile of 19:56); see README.md here.
exec scripts/two_core_bench.sh "${OUT:-results/bench-amd512-shipped}" dflash+lookup,lookup -- \
  --drafter dflash+lookup --threads 1 --datasets math500,gsm8k,aime25,humaneval,mbpp,livecodebench,mt_bench,alpaca \
  --methods ar,ddtree:3,4,5,8,caddtree,caddtree@nogate --num-prompts 30 --max-new-tokens 256 --temperature 0
