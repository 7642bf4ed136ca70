#!/bin/bash
# CaDDTree against the fixed budgets with one bench process and the other core idle: in the two-process runs each
# method's timing also depends on what the other core runs at that moment (HF generate, plain decoding or a tree
# method all load memory differently), which the per-prompt pairing does not cancel. Same prompts and settings as
# results/bench-t0-256-vocab (8 sets x 10 prompts, 256 tokens, greedy, mix drafter + realised gate), our methods
# only: plain decoding, fixed budgets 4/5/8, CaDDTree. The profile is taken the same way (one process, the other core
# idle). Rerunning this script resumes the run where it stopped. Run from the repository root with the venv on PATH.
export OMP_NUM_THREADS=1
export CADDTREE_CPU_KERNEL=panel
taskset -c 0 caddtree profile --drafter dflash+lookup --threads 1 --preset coarse
ARGS="--drafter dflash+lookup --threads 1 --datasets math500,gsm8k,aime25,humaneval,mbpp,livecodebench,mt_bench,alpaca \
  --methods ar,ddtree:4,5,8,caddtree --num-prompts 10 --max-new-tokens 256 --temperature 0 \
  --out results/bench-t0-256-oneproc"
taskset -c 0 caddtree bench $ARGS
