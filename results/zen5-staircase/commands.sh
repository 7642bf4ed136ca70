#!/bin/bash
# The verify cost for every tree size 0-18 at ℓ = 128, 256, 384, 1024, measured twice at the same time, one process
# per core (both cores busy, as in the benches). Run from the repository root with the venv on PATH.
export OMP_NUM_THREADS=1 CADDTREE_CPU_KERNEL=panel
taskset -c 0 python results/zen5-staircase/measure.py > results/zen5-staircase/core0.json &
taskset -c 1 python results/zen5-staircase/measure.py > results/zen5-staircase/core1.json &
wait
# then, after results/zen5-profile-ab2/, the same on the coarse preset's grid (grid_core*.json):
taskset -c 0 python results/zen5-staircase/measure.py grid > results/zen5-staircase/grid_core0.json &
taskset -c 1 python results/zen5-staircase/measure.py grid > results/zen5-staircase/grid_core1.json &
wait
