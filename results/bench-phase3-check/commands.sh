#!/bin/bash
# End-to-end check of the phase-3 drafter (now shipped as drafters/smollm2-135m-instruct-dflash) against the phase-2
# one it replaced, both mixed with prompt lookup under CaDDTree with the draft gate, back to back on each prompt:
#   caddtree      = phase-2 drafter + lookup (a copy of the previous release, runs/dflash/phase2-drafter:
#                   `git show 1eb68f7:drafters/smollm2-135m-instruct-dflash/model.safetensors` restores it)
#   mix-caddtree  = the shipped (phase-3) drafter + lookup
# Two parts, one per core, then the combined report. Rerunning resumes.
export OMP_NUM_THREADS=1
ARGS="--drafter runs/dflash/phase2-drafter+lookup --threads 1 --datasets gsm8k,math500,humaneval,mbpp \
  --methods ar,caddtree,mix-caddtree,lookup-caddtree --num-prompts 8 --max-new-tokens 256 --temperature 0 \
  --out results/bench-phase3-check"
taskset -c 0 caddtree bench $ARGS --part 1/2 &
taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
