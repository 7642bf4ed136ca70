#!/bin/bash
# Lead from results/bench-intel-phicheck: the profile taken with both cores profiling underpriced trees past 4 nodes
# against the verify times measured in decoding. Re-profile (core 0) while the other core decodes (plain decoding of
# AlpacaEval prompts into a scratch dir, stopped when the profile ends), then the fixed 4-node tree and CaDDTree on
# the prompts of bench-intel-phicheck (humaneval/mbpp 6-13), mix drafter, 256 tokens, greedy, one part per core.
# No `ar`: outputs compared with results/bench-t0-256-n20's plain decoding (32/32):
# python results/exact_vs_plain.py results/bench-intel-reprofile results/bench-t0-256-n20
export OMP_NUM_THREADS=1
taskset -c 1 caddtree bench --drafter lookup --threads 1 --datasets alpaca --methods ar --num-prompts 40 \
  --max-new-tokens 256 --out /tmp/caddtree-load > /dev/null 2>&1 &
LOAD=$!
sleep 20  # the load is decoding before the profile starts
taskset -c 0 caddtree profile --drafter dflash+lookup --threads 1 --preset coarse
kill $LOAD; wait
ARGS="--drafter dflash+lookup --threads 1 --datasets humaneval,mbpp --first-prompt 6 \
  --methods ddtree:4,caddtree --num-prompts 8 --max-new-tokens 256 --temperature 0 \
  --out results/bench-intel-reprofile"
taskset -c 0 caddtree bench $ARGS --part 1/2 &
taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
