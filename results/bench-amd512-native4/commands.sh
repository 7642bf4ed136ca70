#!/bin/bash
# #34 / #37, after the GGUF kernel's multi-row calls moved from an fp32 buffer to registers (5-8-row verifies ~15%
# cheaper) and prompt lookup got its n-gram index: one process on both cores (--threads 2), 8 sets x 12 prompts,
# 256 tokens, default drafter (dflash+lookup), draft gate carried across generations under sampling (the default).
# Greedy: plain decoding, B = 3, CaDDTree, llama.cpp on the same GGUF. Sampled (top-p 0.95, seed 0) at T = 1.0 and
# 0.7: plain, B = 1, CaDDTree. The cost profile is measured first. A rerun with the same OUT resumes.
# llama.cpp: CMAKE_ARGS="-DGGML_NATIVE=ON" pip install llama-cpp-python==0.3.36 diskcache
set -e
OUT="${OUT:-results/bench-amd512-native4}"
caddtree profile --threads 2 --out "$OUT/cost_model.json"
caddtree bench --threads 2 --num-prompts 12 --max-new-tokens 256 --temperature 0 \
  --methods ar,ddtree:3,caddtree,llamacpp --cost-model "$OUT/cost_model.json" --out "$OUT/t0"
for T in 1.0 0.7; do
  caddtree bench --threads 2 --num-prompts 12 --max-new-tokens 256 --temperature "$T" --top-p 0.95 --seed 0 \
    --methods ar,ddtree:1,caddtree --cost-model "$OUT/cost_model.json" --out "$OUT/t$T"
done
