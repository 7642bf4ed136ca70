#!/bin/bash
# #34 / #37 on an AMD EPYC with AVX-512 (2 cores), the configuration a user runs (one process on both cores, default
# drafter dflash+lookup, default CaDDTree: speculation gate on), after the one-pass draft (Layer.draft_forward) and
# the greedy choice in C++. 8 sets x 12 prompts, 256 tokens, cost profile measured first. Greedy: plain, B = 3,
# CaDDTree, llama.cpp on the same GGUF. Sampled (top-p 0.95, seed 0) at T = 1.0 and 0.7: plain and CaDDTree. A rerun
# with the same OUT resumes.
# llama.cpp: CMAKE_ARGS="-DGGML_NATIVE=ON" pip install --no-deps llama-cpp-python==0.3.36; pip install diskcache
set -e
OUT="${OUT:-results/bench-amd512-onepass}"
[ -f "$OUT/cost_model.json" ] || caddtree profile --threads 2 --out "$OUT/cost_model.json"
caddtree bench --threads 2 --num-prompts 12 --max-new-tokens 256 --temperature 0 \
  --methods ar,ddtree:3,caddtree,llamacpp --cost-model "$OUT/cost_model.json" --out "$OUT/t0"
for T in 1.0 0.7; do
  caddtree bench --threads 2 --num-prompts 12 --max-new-tokens 256 --temperature "$T" --top-p 0.95 --seed 0 \
    --methods ar,caddtree --cost-model "$OUT/cost_model.json" --out "$OUT/t$T"
done
