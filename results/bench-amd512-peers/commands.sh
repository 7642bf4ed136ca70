#!/bin/bash
# Peers beside plain decoding, B=5 and CaDDTree: HF generate (hf), HF prompt lookup (hf-lookup), llama.cpp on the same
# GGUF (Q4_1); MATH-500, GSM8K, HumanEval, MT-Bench x 6 prompts, 256 tokens, greedy. Machine of bench-amd512-shipped,
# code c418396, 21:09-21:20 UTC 2026-12-02: a separate run, priced with the headline's first profile (as run,
# --cost-model named results/bench-amd512-shipped/cost_model.json, which then held this copy). Needs
#   CMAKE_ARGS="-DGGML_NATIVE=OFF" pip install --no-cache-dir --no-deps llama-cpp-python==0.3.36 && pip install diskcache
exec scripts/two_core_bench.sh "${OUT:-results/bench-amd512-peers}" - -- \
  --drafter dflash+lookup --threads 1 --datasets math500,gsm8k,humaneval,mt_bench \
  --methods ar,ddtree:5,caddtree,hf,hf-lookup,llamacpp --num-prompts 6 --max-new-tokens 256 --temperature 0 \
  --cost-model results/bench-amd512-peers/cost_model.json
