#!/bin/bash
# #37 on an AMD EPYC with AVX-512 (2 cores): the speculation gate (draft at all this round?) with its default margin
# (0.05) and the re-check rule, greedily (caddtree@specall) and sampled (caddtree@spec), against CaDDTree without it and
# plain decoding, on the shipped target and drafter. One process on both cores (--threads 2), 8 sets x 12 prompts,
# 256 tokens, default drafter (dflash+lookup), cost profile measured first. Sampled: top-p 0.95, seed 0, T = 1.0 and
# 0.7. A rerun with the same OUT resumes.
set -e
OUT="${OUT:-results/bench-amd512-specgate}"
[ -f "$OUT/cost_model.json" ] || caddtree profile --threads 2 --out "$OUT/cost_model.json"
caddtree bench --threads 2 --num-prompts 12 --max-new-tokens 256 --temperature 0 \
  --methods ar,caddtree,caddtree@specall --cost-model "$OUT/cost_model.json" --out "$OUT/t0"
for T in 1.0 0.7; do
  caddtree bench --threads 2 --num-prompts 12 --max-new-tokens 256 --temperature "$T" --top-p 0.95 --seed 0 \
    --methods ar,caddtree,caddtree@spec --cost-model "$OUT/cost_model.json" --out "$OUT/t$T"
done
