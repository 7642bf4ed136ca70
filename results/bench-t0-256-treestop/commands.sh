#!/bin/bash
# The headline (results/bench-t0-256-phase4 prompts and settings: 8 sets x 10 prompts, 256 tokens, greedy) with the
# current code: the pass-aware cost model (C_v = convex f + J per extra pass of the panel kernel's 6 rows) and the
# early stop of the tree build (budget.TreeStop: CaDDTree builds its tree only as far as the size choice can use
# it). Fixed budgets 4/5/8/16 (5 nodes + the root fill the kernel's first pass), CaDDTree with the mix drafter and the
# realised-gain gate, CaDDTree with prompt lookup, the HF peers. Same machine as bench-t0-256-phase4 (2-core AMD EPYC
# with AVX-512), panel kernel, phase-4 drafter; llama.cpp not built here (its figures are in bench-t0-256-panel).
# Profiles first (both cores busy, as in the run), then one part per core, then the combined summary. Rerunning
# this script resumes the run where it stopped. Run from the repository root with the venv on PATH.
export OMP_NUM_THREADS=1
export CADDTREE_CPU_KERNEL=panel
taskset -c 0 caddtree profile --drafter dflash+lookup --threads 1 --preset coarse &
taskset -c 1 caddtree profile --drafter lookup --threads 1 --preset coarse &
wait
ARGS="--drafter dflash+lookup --threads 1 --datasets math500,gsm8k,aime25,humaneval,mbpp,livecodebench,mt_bench,alpaca \
  --methods ar,ddtree:4,5,8,16,caddtree,lookup-caddtree,hf,hf-lookup --num-prompts 10 \
  --max-new-tokens 256 --temperature 0 --out results/bench-t0-256-treestop"
taskset -c 0 caddtree bench $ARGS --part 1/2 &
taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
