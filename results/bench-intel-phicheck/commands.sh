#!/bin/bash
# Follow-up of results/bench-intel-phase5 on the same Intel Xeon with its cached profile: on HumanEval and MBPP
# CaDDTree built 6-7 nodes where the fixed 4-node tree was fastest, its expected accepted length above the accepted
# one. Does calibrating Phi online (caddtree@cal: Decoder(calibrate_phi=True)) close that gap? 8 further prompts per
# set (6-13), the fixed 4-node tree, CaDDTree and CaDDTree@cal, all with the mix; 256 tokens, greedy; one part per
# core, then the report. Rerunning resumes. No `ar` here: its outputs were compared token for token with
# results/bench-t0-256-n20's plain decoding of the same prompts (48/48):
# python results/exact_vs_plain.py results/bench-intel-phicheck results/bench-t0-256-n20
export OMP_NUM_THREADS=1
ARGS="--drafter dflash+lookup --threads 1 --datasets humaneval,mbpp --first-prompt 6 \
  --methods ddtree:4,caddtree,caddtree@cal --num-prompts 8 --max-new-tokens 256 --temperature 0 \
  --out results/bench-intel-phicheck"
taskset -c 0 caddtree bench $ARGS --part 1/2 &
taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
