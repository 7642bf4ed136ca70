#!/bin/bash
# End-to-end check of the phase-5 drafter against the phase-4 one (the release before it), both mixed with prompt
# lookup under CaDDTree with the draft gate, back to back on each prompt:
#   caddtree      = phase-5 drafter + lookup (runs/dflash5/export, trained by the model card's phase-5 commands)
#   mix-caddtree  = the phase-4 drafter + lookup (drafters/smollm2-135m-instruct-dflash as of 3648a55)
# Profiles first (both cores busy, as in the run; the two drafters share one architecture, hence one C_d
# profile), then two parts, one per core, then the combined report. Ran 06:19-06:26 UTC 2026-12-02 on a 2-core
# Intel Xeon (AVX-512, no AMX), first with --num-prompts 5, then the bench lines again with 10 (it resumed).
# Rerunning resumes (a rerun of `caddtree profile` re-measures: skip it to keep this run's profile).
export OMP_NUM_THREADS=1
taskset -c 0 caddtree profile --drafter runs/dflash5/export+lookup --threads 1 --preset coarse &
taskset -c 1 caddtree profile --drafter lookup --threads 1 --preset coarse &
wait
ARGS="--drafter runs/dflash5/export+lookup --threads 1 --datasets gsm8k,math500,humaneval,mbpp \
  --methods caddtree,mix-caddtree --num-prompts 10 --max-new-tokens 256 --temperature 0 \
  --out results/bench-phase5-check"
taskset -c 0 caddtree bench $ARGS --part 1/2 &
taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
