#!/bin/bash
# #34, second pass: the decoder layers in one C++ call (caddtree/lean_layers.cpp) and 4-bit blocks with fp32 scales,
# against llama.cpp in the configuration a user runs (one process, both cores): plain decoding on native blocks (ar),
# fixed budgets B = 3/5, CaDDTree, llama.cpp on the same GGUF with the same threads; 8 datasets x 12 prompts, 256
# tokens, greedy, default drafter (dflash+lookup). HF generate and fp32 plain decoding are not rerun here (HF's path
# did not change: results/bench-amd512-native). A rerun with the same --out resumes.
# llama.cpp: CMAKE_ARGS="-DGGML_NATIVE=ON" pip install llama-cpp-python==0.3.36 diskcache
set -e
OUT="${OUT:-results/bench-amd512-lean2}"
caddtree profile --threads 2 --out "$OUT/cost_model.json"
caddtree bench --threads 2 --num-prompts 12 --max-new-tokens 256 --temperature 0 \
  --methods ar,ddtree:3,5,caddtree,llamacpp --cost-model "$OUT/cost_model.json" --out "$OUT"
python scripts/step_profile.py --threads 2 > "$OUT/step_profile.md"
python scripts/step_profile.py --threads 1 >> "$OUT/step_profile.md"
