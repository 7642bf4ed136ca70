#!/bin/bash
# Drafter phase 6 (shipped) against phase 5 end to end: 4 sets x 8 prompts, 256 tokens, greedy, the mix drafter
# (DFlash + prompt lookup), a fixed 5-node tree (tau deterministic: the drafter's quality alone) and CaDDTree. Each
# drafter runs in its own process, one per core, and the two swap cores half-way (leg 1: prompts of part 1/2, phase
# 5 on core 0, phase 6 on core 1; leg 2: part 2/2, the other way round), so each drafter meets both cores equally.
# Same machine and kernel as results/bench-amd-headline (2-core AMD EPYC, AVX2), run right after it. Run from the
# repository root with the venv on PATH; rerunning resumes.
export OMP_NUM_THREADS=1
export CADDTREE_CPU_KERNEL=panel
mkdir -p runs/phase5-drafter
git show b3107f9:drafters/smollm2-135m-instruct-dflash/model.safetensors > runs/phase5-drafter/model.safetensors
git show b3107f9:drafters/smollm2-135m-instruct-dflash/config.json > runs/phase5-drafter/config.json
ARGS="--threads 1 --datasets gsm8k,math500,humaneval,mbpp --methods ddtree:5,caddtree --num-prompts 8 \
  --max-new-tokens 256 --temperature 0"
P5="--drafter runs/phase5-drafter+lookup --out results/phase6-e2e/phase5"
P6="--drafter dflash+lookup --out results/phase6-e2e/phase6"
taskset -c 0 caddtree bench $ARGS $P5 --part 1/2 &
taskset -c 1 caddtree bench $ARGS $P6 --part 1/2 &
wait
taskset -c 1 caddtree bench $ARGS $P5 --part 2/2 &
taskset -c 0 caddtree bench $ARGS $P6 --part 2/2 &
wait
caddtree bench $ARGS $P5 --report
caddtree bench $ARGS $P6 --report
