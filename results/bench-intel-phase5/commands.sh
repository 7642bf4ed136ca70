#!/bin/bash
# The shipped phase-5 drafter on a second machine, a 2-core Intel Xeon (AVX-512, no AMX), right after
# results/bench-phase5-check (whose cost profile, measured there at 06:19 UTC, this run reuses from the cache):
# plain decoding, fixed budgets 4/8/16 and CaDDTree, all with the mix drafter (dflash+lookup, gate on for CaDDTree);
# math500, gsm8k, humaneval, mbpp x 6 prompts, 256 new tokens, greedy. One part per core, then the report.
# Rerunning resumes. Run from the repository root with the venv on PATH.
export OMP_NUM_THREADS=1
ARGS="--drafter dflash+lookup --threads 1 --datasets math500,gsm8k,humaneval,mbpp \
  --methods ar,ddtree:4,8,16,caddtree --num-prompts 6 --max-new-tokens 256 --temperature 0 \
  --out results/bench-intel-phase5"
taskset -c 0 caddtree bench $ARGS --part 1/2 &
taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
