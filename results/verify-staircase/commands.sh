#!/bin/bash
# The verify cost for every tree size 0-12 at ℓ = 128, measured twice at the same time, one process per core (so both
# cores are busy, as in the benches). Run from the repository root with the venv on PATH.
export OMP_NUM_THREADS=1
taskset -c 0 python results/verify-staircase/measure.py > results/verify-staircase/core0.json &
taskset -c 1 python results/verify-staircase/measure.py > results/verify-staircase/core1.json &
wait
