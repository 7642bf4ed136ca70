#!/bin/bash
# #34 on an Intel Xeon with AVX-512 and AMX (2 cores): the GGUF kernel with its prefetch spread over the block loop
# (quant3), against llama.cpp, HF generate on the unmodified model and our earlier run on this CPU type
# (results/bench-intel-native). One process on both cores (--threads 2), 8 sets x 12 prompts, 256 tokens, greedy,
# default drafter (dflash+lookup), native Q4_1 weights; the cost profile is measured first; then sampled (top-p 0.95,
# seed 0) at T = 1.0 and 0.7: plain, B = 1, CaDDTree; then one plain step's split. A rerun with the same OUT resumes.
# llama.cpp is built for AVX-512 without AMX (ggml's AMX matmul crashes on this VM, see results/bench-intel-native):
# CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_BMI2=ON -DGGML_FMA=ON -DGGML_F16C=ON
#   -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON"
#   pip install --no-cache-dir --no-deps llama-cpp-python==0.3.36; pip install diskcache
set -e
OUT="${OUT:-results/bench-intel-prefetch}"
caddtree profile --threads 2 --out "$OUT/cost_model.json"
caddtree bench --threads 2 --num-prompts 12 --max-new-tokens 256 --temperature 0 \
  --methods ar,ddtree:3,caddtree,hf,llamacpp --cost-model "$OUT/cost_model.json" --out "$OUT/t0"
for T in 1.0 0.7; do
  caddtree bench --threads 2 --num-prompts 12 --max-new-tokens 256 --temperature "$T" --top-p 0.95 --seed 0 \
    --methods ar,ddtree:1,caddtree --cost-model "$OUT/cost_model.json" --out "$OUT/t$T"
done
python scripts/step_profile.py --threads 2 > "$OUT/step_profile.md"
