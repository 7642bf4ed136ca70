#!/bin/bash
# Does a longer coarse profile (9 repeats instead of 3) give steadier cost curves? Both cores profile at the same
# time (as before a bench run), alternating 3 and 9 repeats, three times each. Run from the repository root with the
# venv on PATH; summary: python results/profile-repeats/summary.py
export OMP_NUM_THREADS=1
export CADDTREE_CPU_KERNEL=panel
taskset -c 0 python results/profile-repeats/measure.py results/profile-repeats/core0.json &
taskset -c 1 python results/profile-repeats/measure.py results/profile-repeats/core1.json &
wait
