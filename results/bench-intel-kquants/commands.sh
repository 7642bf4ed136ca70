#!/bin/bash
# #34: a GGUF in llama.cpp's Q4_K_M mix on an Intel Xeon with AVX-512 and AMX (2 cores), with the drafter a user
# gets: SmolLM2-135M-Instruct requantised from the shipped Q4_1 file (Q5_0 166, Q4_K 16, Q6_K 14, Q8_0 15 tensors,
# F32 norms) names the same model in its general.* keys, so --drafter auto gives the shipped DFlash drafter mixed with
# prompt lookup. One process, 2 threads, 8 sets x 12 prompts, 256 tokens, greedy, cost profile measured first: plain
# on the file's blocks, plain on its dequantised fp32 copy, CaDDTree, llama.cpp on the same file (`t0/`); then one
# plain step's split; then the DFlash drafter's τ on both files (eval-drafter: the same 12 prompts a set, linear block
# and 8-node tree; drafter_tau.jsonl). `t0-coldprofile/` and `t0-lookup/` are the first run of this script, at
# d907b76, 35 minutes earlier: the same t0 command on a profile whose plain step was timed cold (the verify profile
# before 1c6ff51; its cost_model.json inside), and CaDDTree with --drafter lookup on a profile of its own.
# A rerun with the same OUT resumes.
# llama.cpp (its native build crashes on this CPU in ggml's AMX matmul, see results/bench-intel-prefetch):
# CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_BMI2=ON -DGGML_FMA=ON -DGGML_F16C=ON
#   -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON"
#   pip install --no-cache-dir --no-deps llama-cpp-python==0.3.36; pip install diskcache
set -e
OUT="${OUT:-results/bench-intel-kquants}"
GGUF="${GGUF:-/tmp/smollm2-135m-instruct-Q4_K_M.gguf}"
SRC=$(python -c "from caddtree.target import _gguf_path; print(_gguf_path('smollm2-135m-instruct'))")
[ -f "$GGUF" ] || python scripts/requantize_gguf.py "$SRC" "$GGUF" Q4_K_M
[ -f "$OUT/cost_model.json" ] || caddtree profile --target "$GGUF" --threads 2 --out "$OUT/cost_model.json"
caddtree bench --target "$GGUF" --threads 2 --num-prompts 12 --max-new-tokens 256 --temperature 0 \
  --methods ar,ar-fp32,caddtree,llamacpp --cost-model "$OUT/cost_model.json" --out "$OUT/t0"
python scripts/step_profile.py --threads 2 --target "$GGUF" 2>/dev/null > "$OUT/step_profile.md"
for T in smollm2-135m-instruct "$GGUF"; do
  caddtree eval-drafter --drafter caddtree/drafters/smollm2-135m-instruct-dflash --target "$T" --n 12 \
    --max-new-tokens 256 --budgets 8 --threads 2 --json "$OUT/drafter_tau.jsonl"
done
