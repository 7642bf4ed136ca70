#!/bin/bash
# A/B of two cost profiles in one run, on the three sets CaDDTree lost in results/bench-zen5-online/ (MBPP, GSM8K,
# HumanEval, its 30 prompts each, --repeats 2 as in results/zen5-repeats/): `caddtree` prices with a new coarse
# profile (every size 0-12, 9 sweeps: the preset since this run), `caddtree@ab` with the 3-sweep coarse profile of
# 04:07 UTC that results/zen5-repeats/ ran on ($CADDTREE_AB_COST). Fixed budgets 4 and 5 beside them. Both cores busy
# while profiling, as in the run; one bench process per core. Run from the repository root with the venv on PATH.
# As run: the code of baf7b4c (records without per-round verify times, added to it during the run); caddtree@ab
# exists only in baf7b4c and 8f0c519 (removed after): `git checkout baf7b4c` to rerun this script.
export OMP_NUM_THREADS=1
export CADDTREE_CPU_KERNEL=panel
export CADDTREE_AB_COST=results/zen5-repeats/cost_model.json
OUT=${OUT:-results/zen5-profile-ab}
if ! ls "$OUT"/records*.jsonl >/dev/null 2>&1; then  # a resumed run keeps the profile it started with
  taskset -c 0 caddtree profile --drafter dflash+lookup --threads 1 --preset coarse &
  taskset -c 1 caddtree profile --drafter lookup --threads 1 --preset coarse &
  wait
fi
ARGS="--drafter dflash+lookup --threads 1 --datasets mbpp,gsm8k,humaneval --methods ddtree:4,5,caddtree,caddtree@ab \
  --num-prompts 30 --max-new-tokens 256 --temperature 0 --repeats 2 --out $OUT"
taskset -c 0 caddtree bench $ARGS --part 1/2 &
taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
