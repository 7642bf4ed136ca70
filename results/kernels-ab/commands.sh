#!/bin/bash
# A/B of the CPU linear kernels end to end: the previous kernels (W^T for one row, oneDNN-packed weights for more;
# commit ba29dc0, checked out in a worktree) against the panel kernel (caddtree/panel_linear.cpp), run at the same
# time, one per core, on the same prompts and settings. Each process profiles its own cost model first. Run from the
# repository root with the venv on PATH (the old run reads the data through an absolute --data-dir: it runs elsewhere).
export OMP_NUM_THREADS=1
ARGS="--data-dir $PWD/../shared/data --drafter dflash+lookup --threads 1 --datasets gsm8k,math500,humaneval,mbpp \
  --methods ar,ddtree:8,caddtree,lookup-caddtree --num-prompts 5 --max-new-tokens 256 --temperature 0"
git worktree add /tmp/old ba29dc0
(cd /tmp/old && PYTHONPATH=/tmp/old taskset -c 0 python -m caddtree.cli bench $ARGS --out "$OLDPWD/results/kernels-ab/old") &
taskset -c 1 caddtree bench $ARGS --out results/kernels-ab/panel &
wait
