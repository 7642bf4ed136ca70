#!/bin/bash
# The headline's command on a 2-core AMD EPYC family 26 model 2 (AVX-512, ~2x faster), with `caddtree@online` (an
# online verify-cost correction, measured neutral and removed after code 507e121: drop it from --methods on later
# code). Code 507e121; prompts 1-15 04:07-04:39 UTC 2026-12-03 (with the profiles), 16-30 04:44-05:15 UTC (bench
# and --report only, the cached profile).
exec scripts/two_core_bench.sh "${OUT:-results/bench-zen5-online}" dflash+lookup,lookup -- \
  --drafter dflash+lookup --threads 1 --datasets math500,gsm8k,aime25,humaneval,mbpp,livecodebench,mt_bench,alpaca \
  --methods ar,ddtree:3,4,5,8,caddtree,caddtree@online --num-prompts 30 --max-new-tokens 256 --temperature 0
