#!/bin/bash
# #34 / #37 on an AMD EPYC with AVX-512 (2 cores), after the cut of a plain step's Python around the C++ layer loop
# (one C++ room check and the cache views made in C++ instead of 30 reserve/advance calls, cos/sin from a table by
# position). One process on both cores (--threads 2), 8 sets x 12 prompts, 256 tokens, default drafter
# (dflash+lookup), cost profile measured first. Greedy: plain, B = 3, CaDDTree, llama.cpp on the same GGUF. Sampled
# (top-p 0.95, seed 0) at T = 1.0 and 0.7: plain, CaDDTree, and CaDDTree@spec0 (the opt-in speculation gate at
# margin 0, a re-check's gain replacing its running mean). A rerun with the same OUT resumes.
# llama.cpp: CMAKE_ARGS="-DGGML_NATIVE=ON" pip install --no-deps llama-cpp-python==0.3.36; pip install diskcache
set -e
OUT="${OUT:-results/bench-amd512-stepcut}"
[ -f "$OUT/cost_model.json" ] || caddtree profile --threads 2 --out "$OUT/cost_model.json"
caddtree bench --threads 2 --num-prompts 12 --max-new-tokens 256 --temperature 0 \
  --methods ar,ddtree:3,caddtree,llamacpp --cost-model "$OUT/cost_model.json" --out "$OUT/t0"
for T in 1.0 0.7; do
  caddtree bench --threads 2 --num-prompts 12 --max-new-tokens 256 --temperature "$T" --top-p 0.95 --seed 0 \
    --methods ar,caddtree,caddtree@spec0 --cost-model "$OUT/cost_model.json" --out "$OUT/t$T"
done
python scripts/step_profile.py --threads 2 > "$OUT/step_profile.md"
