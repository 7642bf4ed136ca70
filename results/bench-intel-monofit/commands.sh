#!/bin/bash
# A/B of the C_v fit on the session's 2-core Intel Xeon (AVX-512, no AMX): CaDDTree priced by the convex fit with
# per-pass jumps (`caddtree@passes`, the default until this run) against the monotone fit of the same measurements
# (`caddtree@mono`), next to the fixed budgets 4 and 8 (the best ones on these sets in results/bench-intel-phase5).
# Core 1 generated phase-6 drafter data the whole time (runs/phase6_data.sh), so everything here ran on core 0
# beside that load: the profile first, then the bench, one process. Run in two steps: the first four sets (their cost
# model: cost_model.first4.json), then the other four on the same verify measurements, with C_d re-timed when the
# cached profile, fitted convex, was rebuilt for the monotone default (9.65 / 11.41 ms at ℓ = 128 / 1024 against
# 9.69 / 12.66: cost_model.json). mix drafter, 256 tokens, greedy; no `ar`:
# python results/exact_vs_plain.py results/bench-intel-monofit results/bench-t0-256-n20
# Rerunning resumes. Run from the repository root with the venv on PATH.
export OMP_NUM_THREADS=1
taskset -c 0 caddtree profile --drafter dflash+lookup --threads 1 --preset coarse 2>&1 | tail -3
ARGS="--drafter dflash+lookup --threads 1 --datasets humaneval,mbpp,gsm8k,math500,aime25,livecodebench,mt_bench,alpaca \
  --methods ddtree:4,8,caddtree@passes,caddtree@mono --num-prompts 8 --max-new-tokens 256 --temperature 0 \
  --out results/bench-intel-monofit"
taskset -c 0 caddtree bench $ARGS
caddtree bench $ARGS --report
