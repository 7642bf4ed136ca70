#!/bin/bash
# CaDDTree against the fixed budgets on 20 prompts per set (results/bench-t0-256-vocab, the headline before, has
# 10, where a set's median moved by more than CaDDTree's edge between two runs of the same code): 8 sets x 20
# prompts (the first 10 are that run's), 256 tokens, greedy; plain decoding, fixed budgets 4/5/8 (16 was >= 14%
# slower than the best on every set of every run on this machine and is left out to fit the run in an hour) and
# CaDDTree with the mix drafter + gate; no peers (they are in bench-t0-256-vocab). Code of 61eed8a: the drafter's
# grouped-query attention and rope table (results/draft-cost-ab), C_d profiled over 15 calls after target steps.
# Same machine (2-core AMD EPYC with AVX-512), panel kernel, phase-4 drafter. Profiles first (both cores busy, as in
# the run), then one part per core, then the summary. Ran 01:02-01:51 UTC 2026-12-02.
# Rerunning this script resumes the run where it stopped. Run from the repository root with the venv on PATH.
export OMP_NUM_THREADS=1
export CADDTREE_CPU_KERNEL=panel
taskset -c 0 caddtree profile --drafter dflash+lookup --threads 1 --preset coarse &
taskset -c 1 caddtree profile --drafter lookup --threads 1 --preset coarse &
wait
ARGS="--drafter dflash+lookup --threads 1 --datasets math500,gsm8k,aime25,humaneval,mbpp,livecodebench,mt_bench,alpaca \
  --methods ar,ddtree:4,5,8,caddtree --num-prompts 20 --max-new-tokens 256 --temperature 0 \
  --out results/bench-t0-256-n20"
taskset -c 0 caddtree bench $ARGS --part 1/2 &
taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
