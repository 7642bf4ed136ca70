#!/bin/bash
# Φ calibration (budget.PhiCalibration, `caddtree@cal`) against CaDDTree as shipped (`caddtree`) and the fixed 4- and
# 8-node trees, back to back on the same 10 prompts of GSM8K and HumanEval, mix drafter, one core (taskset -c 0)
# while the other core generated drafter training data (07:10-07:23 UTC 2026-12-01).
# The run was made while calibration was the default: its records said `caddtree` (calibrated) and `caddtree@nocal`
# (shipped); they were relabelled `caddtree@cal` and `caddtree` when the default went back to no calibration (the
# same code paths), then the summary was written with --report.
export OMP_NUM_THREADS=1
ARGS="--drafter dflash+lookup --threads 1 --datasets humaneval,gsm8k --methods ar,ddtree:4,8,caddtree@cal,caddtree \
  --num-prompts 10 --max-new-tokens 256 --temperature 0 --out results/phi-calibration"
taskset -c 0 caddtree bench $ARGS
caddtree bench $ARGS --report
# the paired ratio calibrated / shipped, per dataset
python -c "
from caddtree import bench
recs = bench.load_records('results/phi-calibration')
for ds in ('humaneval', 'gsm8k'):
    print(ds, bench.paired_ratio(recs, ds, 'caddtree@cal', 'caddtree'))"
