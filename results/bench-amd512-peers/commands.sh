#!/bin/bash
# The peers a user would pick instead, on the machine of results/bench-amd512-shipped/ (2-core AMD EPYC, AVX-512) with
# the shipped code and the cost profile it measured first (the copy in this directory): Hugging Face `generate` plain
# (hf) and with prompt_lookup_num_tokens (hf-lookup) on the same model object, and llama.cpp (llama-cpp-python 0.3.36,
# built with CMAKE_ARGS="-DGGML_NATIVE=OFF" as in results/bench-t0-256-panel/, on the same GGUF file, Q4_1 weights),
# beside plain decoding, the fixed 5-node tree and CaDDTree of our engine, back to back per prompt; MATH-500, GSM8K,
# HumanEval, MT-Bench x 6 prompts (the headline's first 6), 256 new tokens, greedy. Two processes, one per core, then
# the summary. Run from the repository root with the venv on PATH, after
#   CMAKE_ARGS="-DGGML_NATIVE=OFF" pip install --no-cache-dir --no-deps llama-cpp-python==0.3.36 && pip install diskcache
# As run, --cost-model named results/bench-amd512-shipped/cost_model.json, which then held this same profile.
export OMP_NUM_THREADS=1
export CADDTREE_CPU_KERNEL=panel
OUT=${OUT:-results/bench-amd512-peers}
ARGS="--drafter dflash+lookup --threads 1 --datasets math500,gsm8k,humaneval,mt_bench \
  --methods ar,ddtree:5,caddtree,hf,hf-lookup,llamacpp --num-prompts 6 --max-new-tokens 256 --temperature 0 \
  --cost-model results/bench-amd512-peers/cost_model.json --out $OUT"
taskset -c 0 caddtree bench $ARGS --part 1/2 &
taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
