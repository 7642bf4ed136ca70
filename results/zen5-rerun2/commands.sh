#!/bin/bash
# The headline comparison, again (results/bench-amd512-shipped/commands.sh: 8 sets, plain decoding, fixed budgets 3/4/5/8,
# CaDDTree, mix drafter + gate, greedy, 256 new tokens, one process per core) with this session's code on the
# family-26 AMD EPYC: the 9-sweep coarse profile (measured first, both cores busy) and the stop rule's kept choice.
# 15 prompts per set (the first 15 of results/bench-zen5-online/), each record the fastest of two runs
# (--repeats 2, order reversed the second time) to halve the timing noise the per-set oracle comparison drowned in
# there. Rerunning this script resumes the run. A second rerun of results/zen5-current/, right after results/zen5-rerun/ (profiled afresh), (same prompts, methods, repeats) with the
# profile's busy check (more sweeps while the timings stand > 15% above their fastest), after the profile that run
# decoded with turned out disturbed (results/counterfactual/zen5/). Run from the repository root with the venv on PATH.
export OMP_NUM_THREADS=1
export CADDTREE_CPU_KERNEL=panel
OUT=${OUT:-results/zen5-rerun2}
if ! ls "$OUT"/records*.jsonl >/dev/null 2>&1; then  # a resumed run keeps the profile it started with
  taskset -c 0 caddtree profile --drafter dflash+lookup --threads 1 --preset coarse &
  taskset -c 1 caddtree profile --drafter lookup --threads 1 --preset coarse &
  wait
fi
ARGS="--drafter dflash+lookup --threads 1 --datasets math500,gsm8k,aime25,humaneval,mbpp,livecodebench,mt_bench,alpaca \
  --methods ar,ddtree:3,4,5,8,caddtree --num-prompts 15 --max-new-tokens 256 --temperature 0 --repeats 2 --out $OUT"
taskset -c 0 caddtree bench $ARGS --part 1/2 &
taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
