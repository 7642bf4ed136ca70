#!/bin/bash
# Second A/B of two cost profiles in one run, right after results/zen5-profile-ab/ (same machine, sets, prompts and
# --repeats 2): `caddtree` prices with the 9-sweep coarse profile that run measured (06:15 UTC, the cached one),
# `caddtree@ab` with C_v from results/zen5-staircase/ (every size 0-18 at ℓ = 128, 256, 384, 1024), C_d and overhead
# as the first ($CADDTREE_AB_COST, made by results/zen5-profile-ab/staircase_profile.py). Records now hold each
# round's verify time (`verify_ms_rounds`). One bench process per core. Run from the repository root with the venv
# on PATH.
# As run: code baf7b4c; caddtree@ab exists only in baf7b4c and 8f0c519 (removed after): `git checkout baf7b4c`
# to rerun this script.
export OMP_NUM_THREADS=1
export CADDTREE_CPU_KERNEL=panel
export CADDTREE_AB_COST=results/zen5-profile-ab/staircase_cost_model.json
OUT=${OUT:-results/zen5-profile-ab2}
ARGS="--drafter dflash+lookup --threads 1 --datasets mbpp,gsm8k,humaneval --methods ddtree:4,5,caddtree,caddtree@ab \
  --num-prompts 30 --max-new-tokens 256 --temperature 0 --repeats 2 --out $OUT"
taskset -c 0 caddtree bench $ARGS --part 1/2 &
taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
