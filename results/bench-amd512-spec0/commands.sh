#!/bin/bash
# #37, after the speculation gate's pricing fix (a plain choice reached it priced with o_plain - o taken off): the
# gate at its default margin (caddtree@spec, drafts while its running gain is above -5%) and at margin 0
# (caddtree@spec0) against plain decoding and CaDDTree, on the sets where results/bench-amd512-prefetch missed (T =
# 1.0: MT-Bench, AlpacaEval, AIME25, MBPP; T = 0.7: MT-Bench, AlpacaEval) and two where drafting pays at T = 0.7
# (GSM8K, HumanEval); 12 prompts a set, 256 tokens, top-p 0.95, seed 0, one process on both cores, priced with that
# run's cost profile. A rerun with the same OUT resumes.
set -e
OUT="${OUT:-results/bench-amd512-spec0}"
COST=results/bench-amd512-prefetch/cost_model.json
for T in 1.0 0.7; do
  if [ "$T" = 1.0 ]; then DS=mt_bench,alpaca,aime25,mbpp; else DS=mt_bench,alpaca,gsm8k,humaneval; fi
  caddtree bench --threads 2 --num-prompts 12 --max-new-tokens 256 --datasets "$DS" --temperature "$T" --top-p 0.95 \
    --seed 0 --methods ar,caddtree,caddtree@spec,caddtree@spec0 --cost-model "$COST" --out "$OUT/t$T"
done
