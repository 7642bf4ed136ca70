#!/bin/bash
# #34 (rerun after the C++ layer loop): native GGUF weights against llama.cpp, in the configuration a user runs (one process, both cores): plain
# decoding on native blocks (ar) and on dequantised fp32 weights (ar-fp32), fixed budgets B = 3/5, CaDDTree, HF
# generate on the unmodified transformers model (hf), llama.cpp on the same GGUF with the same threads (llamacpp);
# 8 datasets x 12 prompts, 256 tokens, greedy, default drafter (dflash+lookup). A rerun with the same --out resumes.
# llama.cpp: CMAKE_ARGS="-DGGML_NATIVE=ON" pip install llama-cpp-python==0.3.36 diskcache
set -e
OUT="${OUT:-results/bench-amd512-native2}"
caddtree profile --threads 2 --out "$OUT/cost_model.json"
caddtree bench --threads 2 --num-prompts 12 --max-new-tokens 256 --temperature 0 \
  --methods ar,ar-fp32,ddtree:3,5,caddtree,hf,llamacpp --cost-model "$OUT/cost_model.json" --out "$OUT"
python scripts/step_profile.py --threads 2 > "$OUT/step_profile.md"
python scripts/step_profile.py --threads 1 >> "$OUT/step_profile.md"
