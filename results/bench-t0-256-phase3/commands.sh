#!/bin/bash
# The headline run repeated with the phase-3 DFlash drafter (the release shipped in drafters/ since 4e65fb1); the
# same command as results/bench-t0-256-full otherwise. 2-core CPU machine, one part per core, then the combined
# summary. Rerunning this script resumes the run where it stopped. Run from the repository root with the venv on PATH.
export OMP_NUM_THREADS=1
# cost profiles first, one per drafter, both cores busy as during the run (cached per machine, drafter and kernels)
taskset -c 0 caddtree profile --drafter dflash+lookup --threads 1 --preset coarse &
taskset -c 1 caddtree profile --drafter lookup --threads 1 --preset coarse &
wait
ARGS="--drafter dflash+lookup --threads 1 --datasets math500,gsm8k,aime25,humaneval,mbpp,livecodebench,mt_bench,alpaca \
  --methods ar,ddtree:4,8,16,caddtree,caddtree@nogate,lookup-caddtree,hf,hf-lookup,llamacpp --num-prompts 10 \
  --max-new-tokens 256 --temperature 0 --out results/bench-t0-256-phase3"
taskset -c 0 caddtree bench $ARGS --part 1/2 &
taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
