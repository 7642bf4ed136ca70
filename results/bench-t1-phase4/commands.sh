#!/bin/bash
# Temperature 1 with the phase-4 drafter, on the machine of results/bench-t0-256-phase4 (2-core AMD EPYC with
# AVX-512, panel kernel), right after that run and on its cached cost profiles (same machine, drafter and kernel).
# Same methods as results/bench-t1-gated except llama.cpp (not built on this machine), 8 prompts per set instead of 4.
# One part per core, then the combined summary. Rerunning this script resumes the run where it stopped.
# Run from the repository root with the venv on PATH.
export OMP_NUM_THREADS=1
export CADDTREE_CPU_KERNEL=panel
ARGS="--drafter dflash+lookup --threads 1 --datasets gsm8k,math500,humaneval,mt_bench \
  --methods ar,caddtree,caddtree@nogate,lookup-caddtree,hf --num-prompts 8 \
  --max-new-tokens 128 --temperature 1 --out results/bench-t1-phase4"
taskset -c 0 caddtree bench $ARGS --part 1/2 &
taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
