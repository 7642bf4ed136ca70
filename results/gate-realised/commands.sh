#!/bin/bash
# The draft gate learning from realised gains (`caddtree`, the default since a9a1ab5) against the same gate learning
# from the policy's predicted gains (`caddtree@predgate`, the behaviour before), both with the shipped (phase-3)
# DFlash drafter mixed with prompt lookup, and prompt lookup alone (`lookup-caddtree`), back to back on each prompt.
# Prompts 10-17 of each set: the headline runs use prompts 0-9. Two parts, one per core, then the combined report.
# Rerunning resumes.
export OMP_NUM_THREADS=1
ARGS="--drafter dflash+lookup --threads 1 --datasets gsm8k,math500,humaneval,mbpp,mt_bench \
  --methods ar,caddtree,caddtree@predgate,lookup-caddtree --num-prompts 8 --first-prompt 10 --max-new-tokens 256 \
  --temperature 0 --out results/gate-realised"
taskset -c 0 caddtree bench $ARGS --part 1/2 &
taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
