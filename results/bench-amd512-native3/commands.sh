#!/bin/bash
# #34 / #37, after the drafter moved to fbgemm (fp16 layers, int8 head) and compaction stopped copying rows already in
# place: one process on both cores (--threads 2), 8 sets x 12 prompts, 256 tokens, default drafter (dflash+lookup).
# Greedy: plain decoding, B = 3, CaDDTree, CaDDTree with the speculation gate on greedily too (@specall), llama.cpp on the same GGUF.
# Sampled (top-p 0.95, seed 0) at T = 0.7 and 1.0: plain, B = 1, CaDDTree, CaDDTree keeping its draft gate across the
# generations of a setting (@carry). The cost profile is measured first. A rerun with the same OUT resumes.
# llama.cpp: CMAKE_ARGS="-DGGML_NATIVE=ON" pip install llama-cpp-python==0.3.36 diskcache
set -e
OUT="${OUT:-results/bench-amd512-native3}"
caddtree profile --threads 2 --out "$OUT/cost_model.json"
caddtree bench --threads 2 --num-prompts 12 --max-new-tokens 256 --temperature 0 \
  --methods ar,ddtree:3,caddtree,caddtree@specall,llamacpp --cost-model "$OUT/cost_model.json" --out "$OUT/t0"
for T in 0.7 1.0; do
  caddtree bench --threads 2 --num-prompts 12 --max-new-tokens 256 --temperature "$T" --top-p 0.95 --seed 0 \
    --methods ar,ddtree:1,caddtree,caddtree@carry --cost-model "$OUT/cost_model.json" --out "$OUT/t$T"
done
