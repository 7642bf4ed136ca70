#!/bin/bash
# Lead from results/gate-check-avx2: with two processes decoding, rounds cost more than the profile (taken with both
# cores profiling) says, more so for verification (x1.20) than for drafting (x1.10), which makes the DFlash forward
# look dearer to the draft gate. Test: re-profile on core 0 while core 1 decodes (plain decoding of AlpacaEval
# prompts into a scratch dir, stopped when the profile ends), then the same MBPP and LiveCodeBench prompts as
# gate-check-avx2 (8 each): B=5, CaDDTree, CaDDTree@nogate, one part per core. No code change. No `ar`: outputs
# compared with results/bench-amd-headline's plain decoding:
# python results/exact_vs_plain.py results/gate-check-avx2-reprofile results/bench-amd-headline
export OMP_NUM_THREADS=1
export CADDTREE_CPU_KERNEL=panel
taskset -c 1 caddtree bench --drafter lookup --threads 1 --datasets alpaca --methods ar --num-prompts 40 \
  --max-new-tokens 256 --out /tmp/caddtree-load > /dev/null 2>&1 &
LOAD=$!
sleep 20  # the load is decoding before the profile starts
taskset -c 0 caddtree profile --drafter dflash+lookup --threads 1 --preset coarse
kill $LOAD; wait
ARGS="--drafter dflash+lookup --threads 1 --datasets mbpp,livecodebench \
  --methods ddtree:5,caddtree,caddtree@nogate --num-prompts 8 --max-new-tokens 256 --temperature 0 \
  --out results/gate-check-avx2-reprofile"
taskset -c 0 caddtree bench $ARGS --part 1/2 &
taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
