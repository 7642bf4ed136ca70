#!/bin/bash
# CaDDTree pricing drafts at their measured cost (budget.CostScale: the profile's C_d per stage times the measured /
# profiled ratio learned while decoding; the default at 77574ee) against the profile's C_d as is
# (`caddtree@profiledcd`) and the fixed 5-node tree, back to back on each prompt (order alternating per prompt):
# 8 sets x 10 prompts (the first 10 of results/bench-t0-256-n20), 256 tokens, greedy, mix drafter + gate, right
# after bench-t0-256-n20 with its cost profile (cached; C_d profiled at 8.1-10.7 ms while a draft, both stages,
# took 7.7 ms per round in that run). One bench process per core. Result: neutral (caddtree / caddtree@profiledcd
# per prompt 1.006 [0.989, 1.026] over 80 prompts, same share of DFlash rounds and tau), so the next commit removed
# it again: to rerun, `git checkout 77574ee` first. Rerunning resumes. Run from the repository root with the venv
# on PATH; summary_paired.md is `python results/measured-cd/exact.py`.
export OMP_NUM_THREADS=1
export CADDTREE_CPU_KERNEL=panel
ARGS="--drafter dflash+lookup --threads 1 --datasets math500,gsm8k,aime25,humaneval,mbpp,livecodebench,mt_bench,alpaca \
  --methods ddtree:5,caddtree,caddtree@profiledcd --num-prompts 10 --max-new-tokens 256 --temperature 0 \
  --out results/measured-cd"
taskset -c 0 caddtree bench $ARGS --part 1/2 &
taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
