#!/bin/bash
# What the draft gate gives or costs on the code sets, where CaDDTree was over the best fixed budget in the earlier
# headlines (HumanEval): CaDDTree (gate), CaDDTree without the gate (caddtree@nogate: the DFlash forward every
# round) and the fixed 5-node tree, 3 code sets x 8 prompts, 256 tokens, greedy, the shipped mix drafter, two
# processes one per core, methods of a prompt in alternating order. Same machine and kernel as
# results/bench-amd-headline (2-core AMD EPYC, AVX2). Run from the repository root with the venv on PATH.
export OMP_NUM_THREADS=1
export CADDTREE_CPU_KERNEL=panel
ARGS="--drafter dflash+lookup --threads 1 --datasets humaneval,mbpp,livecodebench \
  --methods ddtree:5,caddtree,caddtree@nogate --num-prompts 8 --max-new-tokens 256 --temperature 0 \
  --out results/gate-check-avx2"
taskset -c 0 caddtree bench $ARGS --part 1/2 &
taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
