#!/bin/bash
# CaDDTree against the fixed budgets with the draft gate learning from realised gains (the default since a9a1ab5):
# the headline's prompts and settings (results/bench-t0-256-phase3) with the methods the oracle comparison needs.
# 2-core CPU machine, one part per core, then the combined summary. Rerunning resumes.
export OMP_NUM_THREADS=1
ARGS="--drafter dflash+lookup --threads 1 --datasets math500,gsm8k,aime25,humaneval,mbpp,livecodebench,mt_bench,alpaca \
  --methods ar,ddtree:4,8,16,caddtree --num-prompts 10 --max-new-tokens 256 --temperature 0 \
  --out results/bench-t0-256-realised"
taskset -c 0 caddtree bench $ARGS --part 1/2 &
taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
