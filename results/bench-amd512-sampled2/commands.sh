#!/bin/bash
# #37 on the AMD EPYC (AVX-512), after the sampled round's fixed costs were cut: the build skipped where prompt
# lookup's best node cannot pay (`TreeStop.plain_only`), the draft gate's re-checks backed off to 256 rounds under
# sampling, and the draw in one C++ call (sample.cpp). One process on both cores (--threads 2), 8 sets x 12 prompts,
# 256 tokens, default drafter (dflash+lookup). Sampled (top-p 0.95, seed 0) at T = 1.0 and 0.7: plain, B = 1,
# CaDDTree; greedy: plain and CaDDTree (T = 0 unchanged?). The cost profile is measured first. A rerun with the same
# OUT resumes.
set -e
OUT="${OUT:-results/bench-amd512-sampled2}"
caddtree profile --threads 2 --out "$OUT/cost_model.json"
for T in 1.0 0.7; do
  caddtree bench --threads 2 --num-prompts 12 --max-new-tokens 256 --temperature "$T" --top-p 0.95 --seed 0 \
    --methods ar,ddtree:1,caddtree --cost-model "$OUT/cost_model.json" --out "$OUT/t$T"
done
caddtree bench --threads 2 --num-prompts 12 --max-new-tokens 256 --temperature 0 \
  --methods ar,caddtree --cost-model "$OUT/cost_model.json" --out "$OUT/t0"
# the cost of one draw, warm and after a cache sweep: reference law, sample_token, the CPU kernel (added after the run)
python scripts/draw_cost.py --threads 2 > "$OUT/draw_cost.md"
