#!/bin/bash
# Does the way `caddtree profile` is run bend C_v's shape? Two profiles at once (as the headline's commands.sh runs
# them: their sweeps in lockstep), one alone with the other core idle, one alone beside a decoding bench, then two at
# once again; then verify times per size at ℓ = 300 in a random order / the fixed ascending order (sizes.py).
# Run from the repository root with the venv on PATH.
export OMP_NUM_THREADS=1 CADDTREE_CPU_KERNEL=panel
D=results/zen5-profile-shape; P=$D/profiles; T=${TMPDIR:-/tmp}/zen5-profile-shape; mkdir -p $P $T
C="caddtree profile --threads 1 --preset coarse"
taskset -c 0 $C --drafter dflash+lookup --out $P/lockstep1-mix.json & taskset -c 1 $C --drafter lookup --out $P/lockstep1-lookup.json & wait
taskset -c 0 $C --drafter dflash+lookup --out $P/alone-idle.json
taskset -c 1 caddtree bench --drafter dflash+lookup --threads 1 --datasets gsm8k,mbpp --methods ar,ddtree:5,caddtree \
  --num-prompts 30 --max-new-tokens 256 --temperature 0 --out $T/load --cost-model $P/alone-idle.json > $T/load.log 2>&1 &
L=$!; sleep 40
taskset -c 0 $C --drafter dflash+lookup --out $P/alone-beside-decoding.json
kill $L; wait
taskset -c 0 $C --drafter dflash+lookup --out $P/lockstep2-mix.json & taskset -c 1 $C --drafter lookup --out $P/lockstep2-lookup.json & wait
python $D/shape.py $P/*.json results/zen5-lean/cost_model.json results/zen5-lean2/cost_model.json \
  results/zen5-profile-ab2/cost_model.json results/zen5-current/cost_model.json > $D/shapes.txt
# seed 0: ascending order every sweep; another seed: a random order per sweep
(taskset -c 0 python $D/sizes.py 300 40 1 > $T/a.txt &); taskset -c 1 python $D/sizes.py 300 40 2 > $T/b.txt; sleep 8
(taskset -c 0 python $D/sizes.py 300 40 0 > $T/c.txt &); taskset -c 1 python $D/sizes.py 300 40 3 > $T/d.txt; sleep 8
cat $T/[abcd].txt | grep -v Loading > $D/sizes.txt
# the replays (no clock): CaDDTree choosing on each run's profile, on it refitted smooth, or on decoding's own costs
# (the "caddtree gate" / "caddtree gate, charged costs" rows), every round charged decoding's own costs of that run
for R in zen5-lean zen5-lean2; do
  python results/counterfactual/refit_smooth.py results/$R/cost_model.json $T/$R-smooth.json
  for P in results/$R/cost_model.json $T/$R-smooth.json; do
    MEASURED=results/$R python results/counterfactual/analyse.py $P results/counterfactual/zen5/rounds.jsonl.gz \
      > $D/replay-$R-$(basename $P .json).txt
  done
done
