#!/bin/bash
# The exact commands of this run (2-core CPU machine; both parts ran 15:33-16:17 UTC and were stopped there): one part per core, then the
# combined summary. Rerunning this script resumes the run where it stopped.
ARGS="--drafter dflash --threads 1 --datasets math500,gsm8k,aime25,humaneval,mbpp,livecodebench,mt_bench,alpaca \
  --methods ar,ddtree:8,16,32,caddtree,lookup-caddtree,hf,hf-lookup --num-prompts 10 --max-new-tokens 128 \
  --temperature 0 --out results/bench-dflash-t0-full"
OMP_NUM_THREADS=1 taskset -c 0 caddtree bench $ARGS --part 1/2 &
OMP_NUM_THREADS=1 taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
