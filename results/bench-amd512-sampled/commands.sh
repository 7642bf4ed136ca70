#!/bin/bash
# #37: sampling at T = 0.7 and T = 1.0 (top-p 0.95, seed 0) in the configuration a user runs (one process, both cores):
# plain decoding, fixed budgets B = 1 and 3, CaDDTree as shipped (drafter marginals processed as the target's logits,
# Φ calibrated per setting, the draft gate backing off), and CaDDTree with the speculation gate (`@spec`, off by
# default); 8 sets x 12 prompts, 256 tokens, drafter dflash+lookup, the cost profile of results/bench-amd512-native.
# A rerun with the same OUT resumes.
set -e
OUT="${OUT:-results/bench-amd512-sampled}"
for T in 0.7 1.0; do
  caddtree bench --threads 2 --num-prompts 12 --max-new-tokens 256 --temperature "$T" --top-p 0.95 --seed 0 \
    --methods ar,ddtree:1,3,caddtree,caddtree@spec --cost-model results/bench-amd512-native/cost_model.json \
    --out "$OUT/t$T"
done
# T = 0 unchanged: 3 prompts per set, greedy, against the headline run's outputs (same prompts, same machine type;
# the t0/ committed here ran with --out /t0, OUT unset by mistake, and was moved)
caddtree bench --threads 2 --num-prompts 3 --max-new-tokens 256 --temperature 0 --methods ar,caddtree \
  --cost-model results/bench-amd512-native/cost_model.json --out "$OUT/t0"
python scripts/same_tokens.py results/bench-amd512-native "$OUT/t0" caddtree ar > "$OUT/t0/same_tokens.txt"
# what a draw costs: the reference law (sort + multinomial) against sample_token, on SmolLM2's logits
python scripts/draw_cost.py --threads 2 > "$OUT/draw_cost.md"
