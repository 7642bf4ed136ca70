#!/bin/bash
# #37 on an AMD EPYC with AVX-512 (2 cores): the speculation gate's margin shrunk by the share of drafted rounds that
# verify a tree (the default) against the flat 5% margin (caddtree@flatmargin), in the configuration a user runs (one
# process on both cores, default drafter dflash+lookup, defaults throughout), cost profile measured first.
# 8 sets x 12 prompts, 256 tokens: sampled at T = 1.0 and 0.7 (top-p 0.95, seed 0), then greedy (T = 0: same outputs,
# speed within noise). A rerun with the same OUT resumes.
set -e
OUT="${OUT:-results/bench-amd512-treemargin}"
[ -f "$OUT/cost_model.json" ] || caddtree profile --threads 2 --out "$OUT/cost_model.json"
for T in 1.0 0.7; do
  caddtree bench --threads 2 --num-prompts 12 --max-new-tokens 256 --temperature "$T" --top-p 0.95 --seed 0 \
    --methods ar,caddtree,caddtree@flatmargin --cost-model "$OUT/cost_model.json" --out "$OUT/t$T"
done
caddtree bench --threads 2 --num-prompts 12 --max-new-tokens 256 --temperature 0 \
  --methods ar,caddtree,caddtree@flatmargin --cost-model "$OUT/cost_model.json" --out "$OUT/t0"
