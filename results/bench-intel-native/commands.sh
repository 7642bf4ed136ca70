#!/bin/bash
# #34 / #37 on the CPU type #34 was filed on: a 2-core Intel Xeon with AVX-512 and AMX, one process on both cores
# (--threads 2), 8 sets x 12 prompts, 256 tokens, default drafter (dflash+lookup), native Q4_1 weights.
# Greedy: plain decoding, B = 3, CaDDTree, HF generate on the unmodified transformers model, llama.cpp on the same
# GGUF. Sampled (top-p 0.95, seed 0) at T = 1.0 and 0.7: plain, B = 1, CaDDTree. Then one plain step's split per forward
# configuration. The cost profile is measured first. A rerun with the same OUT resumes.
# llama.cpp: built natively (-DGGML_NATIVE=ON) it crashes on this machine in ggml's AMX matmul (SIGSEGV in
# ggml_backend_amx_mul_mat, Q4_1), so it is built for AVX-512 (VNNI, BF16) without AMX:
# CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_BMI2=ON -DGGML_FMA=ON -DGGML_F16C=ON
#   -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON"
#   pip install --no-cache-dir --force-reinstall --no-deps llama-cpp-python==0.3.36; pip install diskcache
set -e
OUT="${OUT:-results/bench-intel-native}"
caddtree profile --threads 2 --out "$OUT/cost_model.json"
caddtree bench --threads 2 --num-prompts 12 --max-new-tokens 256 --temperature 0 \
  --methods ar,ddtree:3,caddtree,hf,llamacpp --cost-model "$OUT/cost_model.json" --out "$OUT/t0"
for T in 1.0 0.7; do
  caddtree bench --threads 2 --num-prompts 12 --max-new-tokens 256 --temperature "$T" --top-p 0.95 --seed 0 \
    --methods ar,ddtree:1,caddtree --cost-model "$OUT/cost_model.json" --out "$OUT/t$T"
done
python scripts/step_profile.py --threads 2 > "$OUT/step_profile.md"
