#!/bin/bash
# #34: a GGUF in llama.cpp's Q4_K_M mix (SmolLM2-135M-Instruct requantised from the shipped Q4_1 file: Q5_0 166, Q4_K
# 16, Q6_K 14, Q8_0 15 tensors, F32 norms), run on its own blocks (Q4_K as Q4_1S, Q5_0 as Q5_0S, Q6_K as Q8S,
# repacked at load) against its dequantised fp32 weights and llama.cpp on the same file; CaDDTree with prompt lookup
# (the shipped DFlash drafter belongs to the Q4_1 file's weights). One process, 2 threads, 8 sets x 3 prompts, 256
# tokens, greedy, cost profile measured first. A rerun with the same OUT resumes.
# llama.cpp: CMAKE_ARGS="-DGGML_NATIVE=ON" pip install --no-deps llama-cpp-python==0.3.36; pip install diskcache
set -e
OUT="${OUT:-results/bench-amd512-kquants}"
GGUF="${GGUF:-/tmp/smollm2-135m-instruct-Q4_K_M.gguf}"
SRC=$(python -c "from caddtree.target import _gguf_path; print(_gguf_path('smollm2-135m-instruct'))")
[ -f "$GGUF" ] || python scripts/requantize_gguf.py "$SRC" "$GGUF" Q4_K_M
[ -f "$OUT/cost_model.json" ] || caddtree profile --target "$GGUF" --drafter lookup --threads 2 --preset coarse \
  --out "$OUT/cost_model.json"
caddtree bench --target "$GGUF" --drafter lookup --threads 2 --num-prompts 3 --max-new-tokens 256 --temperature 0 \
  --methods ar,ar-fp32,caddtree,llamacpp --cost-model "$OUT/cost_model.json" --out "$OUT/t0"
# one plain step's split (ℓ = 300), after the run: step_profile.md
python scripts/step_profile.py --threads 2 --target "$GGUF" 2>/dev/null > "$OUT/step_profile.md"
