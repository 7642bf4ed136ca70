#!/bin/bash
# #34, second pass (a short check, not the full table): the decoder layers in one C++ call (caddtree/lean_layers.cpp),
# 4-bit blocks with fp32 scales, per-head attention tasks. Our plain decoding on native blocks (ar) against llama.cpp on
# the same GGUF, one process on both cores, 8 datasets x 3 prompts, 256 tokens, greedy; then the step split.
# The full table (fixed budgets, CaDDTree, HF generate, 12 prompts) is results/bench-amd512-native, before this pass.
# llama.cpp: CMAKE_ARGS="-DGGML_NATIVE=ON" pip install llama-cpp-python==0.3.36 diskcache
set -e
OUT="${OUT:-results/bench-amd512-lean2}"
caddtree bench --threads 2 --num-prompts 3 --max-new-tokens 256 --temperature 0 --methods ar,llamacpp --out "$OUT"
python scripts/step_profile.py --threads 2 > "$OUT/step_profile.md"
