#!/bin/bash
# CaDDTree with and without the online verify-cost correction (`caddtree@online`, costmodel.OnlineCost), side by side
# with plain decoding and fixed budgets 3/4/5/8, on a 2-core AMD EPYC with AVX-512 (family 26 model 2, KVM guest;
# plain decoding ~21 ms/token, about twice as fast as the machine of results/bench-amd512-shipped/), the shipped
# code otherwise (mix drafter, draft gate, monotone C_v fit). 8 sets x 30 prompts, 256 new tokens, greedy,
# --threads 1, one bench process per core. Profiles first (both cores busy, as in the run), then one bench part per
# core, then the summary. Rerunning this script resumes the run where it stopped. Run from the repository root with
# the venv on PATH.
# As run: code 507e121 (`caddtree@online` and costmodel.OnlineCost exist only there: measured neutral here and
# removed in the next commit; `git checkout 507e121` to rerun this script as is, or drop caddtree@online from
# --methods on later code: the other methods are unchanged). This script with --num-prompts 15 (04:07-04:39 UTC
# 2026-12-03), then its two bench lines and --report again with --num-prompts 30 (04:44-05:15 UTC, no new profile:
# the cached one of 04:07 was loaded), which added prompts 16-30 of each set. This script asks for 30 at once.
export OMP_NUM_THREADS=1
export CADDTREE_CPU_KERNEL=panel
OUT=${OUT:-results/bench-zen5-online}
taskset -c 0 caddtree profile --drafter dflash+lookup --threads 1 --preset coarse &
taskset -c 1 caddtree profile --drafter lookup --threads 1 --preset coarse &
wait
ARGS="--drafter dflash+lookup --threads 1 --datasets math500,gsm8k,aime25,humaneval,mbpp,livecodebench,mt_bench,alpaca \
  --methods ar,ddtree:3,4,5,8,caddtree,caddtree@online --num-prompts 30 --max-new-tokens 256 --temperature 0 \
  --out $OUT"
taskset -c 0 caddtree bench $ARGS --part 1/2 &
taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
