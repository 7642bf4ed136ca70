#!/bin/bash
# The headline (results/bench-t0-256-treestop prompts and settings: 8 sets x 10 prompts, 256 tokens, greedy) with the
# current code: blocked top-k / argmax over the vocabulary (caddtree/vocab.py) in the tree build and the greedy
# acceptance, and the method order alternating per prompt (forward on even prompts, backward on odd ones, `ar`
# first). Fixed budgets 4/5/8/16, CaDDTree with the mix drafter and the realised-gain gate, CaDDTree with prompt
# lookup, the HF peers. Same machine (2-core AMD EPYC with AVX-512), panel kernel, phase-4 drafter; llama.cpp not
# built here. Profiles first (both cores busy, as in the run), then one part per core, then the combined summary.
# Rerunning this script resumes the run where it stopped. Run from the repository root with the venv on PATH.
export OMP_NUM_THREADS=1
export CADDTREE_CPU_KERNEL=panel
taskset -c 0 caddtree profile --drafter dflash+lookup --threads 1 --preset coarse &
taskset -c 1 caddtree profile --drafter lookup --threads 1 --preset coarse &
wait
ARGS="--drafter dflash+lookup --threads 1 --datasets math500,gsm8k,aime25,humaneval,mbpp,livecodebench,mt_bench,alpaca \
  --methods ar,ddtree:4,5,8,16,caddtree,lookup-caddtree,hf,hf-lookup --num-prompts 10 \
  --max-new-tokens 256 --temperature 0 --out results/bench-t0-256-vocab"
taskset -c 0 caddtree bench $ARGS --part 1/2 &
taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
