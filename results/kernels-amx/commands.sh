#!/bin/bash
# A/B of the CPU linear kernels end to end (not run yet, see README.md): the panel kernel (CADDTREE_CPU_KERNEL=panel, default) against the AMX kernel
# (CADDTREE_CPU_KERNEL=amx; caddtree/panel_linear.cpp), run at the same time, one per core, on the same prompts and
# settings. Each process profiles its own cost model first (profiles are keyed by the kernel version). Run from the
# repository root with the venv on PATH, on a CPU with AMX (Intel Sapphire Rapids or later). B = 15: the largest tree
# whose verification (root + 15 nodes) fits one 16-row AMX tile.
export OMP_NUM_THREADS=1
ARGS="--drafter dflash+lookup --threads 1 --datasets gsm8k,math500,humaneval,mbpp \
  --methods ar,ddtree:8,ddtree:15,caddtree --num-prompts 6 --max-new-tokens 256 --temperature 0"
CADDTREE_CPU_KERNEL=panel taskset -c 0 caddtree bench $ARGS --out results/kernels-amx/panel &
CADDTREE_CPU_KERNEL=amx taskset -c 1 caddtree bench $ARGS --out results/kernels-amx/amx &
wait
python results/ab_compare.py results/kernels-amx panel amx > results/kernels-amx/compare.md
