#!/bin/bash
# #34 / #37 on an AMD EPYC with AVX-512 (2 cores): the GGUF kernel with its prefetch spread over the block loop
# (quant3) and the cost model's own overhead for the plain option (o_plain). One process on both cores (--threads 2),
# 8 sets x 12 prompts, 256 tokens, default drafter (dflash+lookup). Cost profile first. Greedy: plain, B = 3,
# CaDDTree, llama.cpp on the same GGUF. Sampled (top-p 0.95, seed 0) at T = 1.0 and 0.7: plain, B = 1, CaDDTree,
# CaDDTree@oneover (the plain option priced at a tree round's overhead, as before o_plain) and CaDDTree@spec (the
# opt-in speculation gate). Then HF generate on the unmodified transformers model beside plain, 3 prompts a set (a
# ~70 ms step here), and one plain step's split. A rerun with the same OUT resumes.
# llama.cpp: CMAKE_ARGS="-DGGML_NATIVE=ON" pip install --no-deps llama-cpp-python==0.3.36; pip install diskcache
set -e
OUT="${OUT:-results/bench-amd512-prefetch}"
caddtree profile --threads 2 --out "$OUT/cost_model.json"
caddtree bench --threads 2 --num-prompts 12 --max-new-tokens 256 --temperature 0 \
  --methods ar,ddtree:3,caddtree,llamacpp --cost-model "$OUT/cost_model.json" --out "$OUT/t0"
for T in 1.0 0.7; do
  caddtree bench --threads 2 --num-prompts 12 --max-new-tokens 256 --temperature "$T" --top-p 0.95 --seed 0 \
    --methods ar,ddtree:1,caddtree,caddtree@oneover,caddtree@spec --cost-model "$OUT/cost_model.json" --out "$OUT/t$T"
done
caddtree bench --threads 2 --num-prompts 3 --max-new-tokens 256 --temperature 0 \
  --methods ar,hf --cost-model "$OUT/cost_model.json" --out "$OUT/hf"
python scripts/step_profile.py --threads 2 > "$OUT/step_profile.md"
