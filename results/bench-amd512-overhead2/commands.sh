#!/bin/bash
# #37 on the AMD EPYC (AVX-512): the command of the first per-node pricing run (results/bench-amd512-overhead/, on a
# faulty profile; removed, at commit ee9763b) rerun on the fixed profile (d8c1d76, run on dbedf58): the round's
# overhead priced o(ℓ) + o_n · n (profile.py) against the old pricing of the same profile
# (caddtree@fullbuild: the full-budget build charged to every round). One process on both cores (--threads 2),
# 8 sets x 12 prompts, 256 tokens, default drafter (dflash+lookup). Sampled (top-p 0.95, seed 0) at T = 1.0 and 0.7:
# plain, B = 1, CaDDTree, CaDDTree@fullbuild; greedy: plain, CaDDTree, @fullbuild (outputs must equal
# bench-amd512-native4/t0's). The cost profile is measured first. A rerun with the same OUT resumes.
set -e
OUT="${OUT:-results/bench-amd512-overhead2}"
caddtree profile --threads 2 --out "$OUT/cost_model.json"
caddtree bench --threads 2 --num-prompts 12 --max-new-tokens 256 --temperature 1.0 --top-p 0.95 --seed 0 \
  --methods ar,ddtree:1,caddtree,caddtree@fullbuild --cost-model "$OUT/cost_model.json" --out "$OUT/t1.0"
caddtree bench --threads 2 --num-prompts 12 --max-new-tokens 256 --temperature 0 \
  --methods ar,caddtree,caddtree@fullbuild --cost-model "$OUT/cost_model.json" --out "$OUT/t0"
caddtree bench --threads 2 --num-prompts 12 --max-new-tokens 256 --temperature 0.7 --top-p 0.95 --seed 0 \
  --methods ar,ddtree:1,caddtree,caddtree@fullbuild --cost-model "$OUT/cost_model.json" --out "$OUT/t0.7"
