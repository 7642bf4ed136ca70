#!/bin/bash
# Is crossing into the panel kernel's second pass (6+ tree nodes) worth it when CaDDTree's draft is confident?
# CaDDTree as shipped against CaDDTree capped at 5 nodes (`onepass`) and the fixed 5-node tree, one process per core
# (22:27-22:33 UTC 2026-12-01, the engine of e48ab01; the script runs the decoders itself). Run from the repository
# root with the venv on PATH; summary: python results/onepass-check/summary.py
export OMP_NUM_THREADS=1
export CADDTREE_CPU_KERNEL=panel
taskset -c 0 python results/onepass-check/measure.py results/onepass-check/core0.json gsm8k,humaneval &
taskset -c 1 python results/onepass-check/measure.py results/onepass-check/core1.json math500,mbpp &
wait
