#!/bin/bash
# Counterfactual rounds of the shipped drafter on the family-26 AMD EPYC (results/counterfactual/README.md for the
# method), priced at decoding's own costs. Run from the repository root with the venv on PATH.
export OMP_NUM_THREADS=1 CADDTREE_CPU_KERNEL=panel
P=results/zen5-profile-ab2/cost_model.json   # the trajectory's profile: the 9-sweep one of 06:15 UTC
S=mbpp,gsm8k,humaneval,math500,aime25,livecodebench,mt_bench,alpaca
D=${D:-results/counterfactual/zen5}
taskset -c 0 python results/counterfactual/collect.py $S 12 $D/rounds.part1.jsonl $P 1/2 &
taskset -c 1 python results/counterfactual/collect.py $S 12 $D/rounds.part2.jsonl $P 2/2 &
wait
taskset -c 0 python results/counterfactual/collect.py train 96 $D/rounds.part1.jsonl $P 1/2 &
taskset -c 1 python results/counterfactual/collect.py train 96 $D/rounds.part2.jsonl $P 2/2 &
wait
cat $D/rounds.part1.jsonl $D/rounds.part2.jsonl | gzip -9 > $D/rounds.jsonl.gz && rm $D/rounds.part?.jsonl
# rules choose on a profile; every round is charged what rounds of its size cost in results/zen5-current/'s decoding
MEASURED=results/zen5-current python results/counterfactual/analyse.py $P $D/rounds.jsonl.gz > $D/analysis.txt
MEASURED=results/zen5-current python results/counterfactual/analyse.py results/zen5-current/cost_model.json \
  $D/rounds.jsonl.gz > $D/analysis-disturbed-profile.txt
# the 06:15 profile refitted convex without the kernel's pass steps (row_group 1): a smooth C_v, as decoding's
python results/counterfactual/refit_smooth.py $P $D/profile_smooth.json
MEASURED=results/zen5-current python results/counterfactual/analyse.py $D/profile_smooth.json $D/rounds.jsonl.gz \
  > $D/analysis-smooth-profile.txt
