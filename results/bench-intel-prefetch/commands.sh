#!/bin/bash
# #34 on an Intel Xeon with AVX-512 and AMX (2 cores): the GGUF kernel with its prefetch spread over the block loop
# (quant3, ba91675), the same command as results/bench-intel-native (which ran the kernel before it; removed for room,
# at a2b9eca): cost profile first; greedy plain, B = 3, CaDDTree, HF generate on the unmodified model, llama.cpp;
# sampled (top-p 0.95, seed 0) at T = 1.0 and 0.7: plain, B = 1, CaDDTree; then one plain step's split. One process on
# both cores (--threads 2), 8 sets x 12 prompts, 256 tokens, default drafter (dflash+lookup), native Q4_1 weights.
# Rerun with the same OUT to resume.
# llama.cpp: built natively (-DGGML_NATIVE=ON) it crashes on this machine in ggml's AMX matmul (SIGSEGV in
# ggml_backend_amx_mul_mat, Q4_1), so it is built for AVX-512 (VNNI, BF16) without AMX:
# CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_BMI2=ON -DGGML_FMA=ON -DGGML_F16C=ON
#   -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON"
#   pip install --no-cache-dir --force-reinstall --no-deps llama-cpp-python==0.3.36; pip install diskcache
set -e
OUT="${OUT:-results/bench-intel-prefetch}"
[ -f "$OUT/cost_model.json" ] || caddtree profile --threads 2 --out "$OUT/cost_model.json"
caddtree bench --threads 2 --num-prompts 12 --max-new-tokens 256 --temperature 0 \
  --methods ar,ddtree:3,caddtree,hf,llamacpp --cost-model "$OUT/cost_model.json" --out "$OUT/t0"
for T in 1.0 0.7; do
  caddtree bench --threads 2 --num-prompts 12 --max-new-tokens 256 --temperature "$T" --top-p 0.95 --seed 0 \
    --methods ar,ddtree:1,caddtree --cost-model "$OUT/cost_model.json" --out "$OUT/t$T"
done
python scripts/step_profile.py --threads 2 > "$OUT/step_profile.md"
