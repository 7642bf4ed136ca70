#!/bin/bash
# The headline on a 2-core Intel Xeon (AVX-512, no AMX) with the shipped phase-5 drafter and the monotone C_v fit
# (the default since results/bench-intel-monofit): plain decoding, fixed budgets 4/5/8 and CaDDTree, all with the mix
# drafter (dflash+lookup; draft gate on for CaDDTree), 8 sets x 10 prompts, 256 new tokens, greedy, the methods of a
# prompt in alternating order. One bench process on core 0 while core 1 generated phase-6 drafter data (the load a
# second bench process would be); the cost model is the cached one the second half of bench-intel-monofit used
# (profiled on core 0 under the same load; its copy: cost_model.json). Rerunning resumes. From the repository root
# with the venv on PATH; table: python results/headline_table.py results/bench-intel-headline
export OMP_NUM_THREADS=1
ARGS="--drafter dflash+lookup --threads 1 --datasets math500,gsm8k,aime25,humaneval,mbpp,livecodebench,mt_bench,alpaca \
  --methods ar,ddtree:4,5,8,caddtree --num-prompts 10 --max-new-tokens 256 --temperature 0 \
  --out results/bench-intel-headline"
taskset -c 0 caddtree bench $ARGS
caddtree bench $ARGS --report
