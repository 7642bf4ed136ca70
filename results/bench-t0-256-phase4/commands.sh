#!/bin/bash
# The headline run with the phase-4 drafter (drafters/smollm2-135m-instruct-dflash as shipped at 1da9517), the panel
# kernel (version panel1) and the realised-gain draft gate. Same prompts, methods and settings as
# results/bench-t0-256-panel (the phase-3 drafter's headline), except the llama.cpp peer (not built on this machine;
# its figures are in bench-t0-256-panel). One part per core, then the combined summary. Rerunning this script resumes
# the run where it stopped. Run from the repository root with the venv on PATH.
# Machine: 2 cores, AMD EPYC with AVX-512 (not the Intel Xeon of bench-t0-256-panel: compare ratios, not ms). A first
# attempt on the Intel machine was discarded: other jobs shared its cores for 27 of its 64 minutes.
export OMP_NUM_THREADS=1
export CADDTREE_CPU_KERNEL=panel
# cost profiles first, one per drafter, both cores busy as during the run (cached per machine, drafter and kernels)
taskset -c 0 caddtree profile --drafter dflash+lookup --threads 1 --preset coarse &
taskset -c 1 caddtree profile --drafter lookup --threads 1 --preset coarse &
wait
ARGS="--drafter dflash+lookup --threads 1 --datasets math500,gsm8k,aime25,humaneval,mbpp,livecodebench,mt_bench,alpaca \
  --methods ar,ddtree:4,8,16,caddtree,lookup-caddtree,hf,hf-lookup --num-prompts 10 \
  --max-new-tokens 256 --temperature 0 --out results/bench-t0-256-phase4"
taskset -c 0 caddtree bench $ARGS --part 1/2 &
taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
