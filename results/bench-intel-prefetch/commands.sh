#!/bin/bash
# #34 on an Intel Xeon with AVX-512 and AMX (2 cores): the GGUF kernel with its prefetch spread over the block loop
# (quant3, ba91675), the same command as results/bench-intel-native (which ran the kernel before it), new OUT: cost
# profile first; greedy plain, B = 3, CaDDTree, HF generate on the unmodified model, llama.cpp (built for AVX-512
# without AMX, as that file says); sampled (top-p 0.95, seed 0) at T = 1.0 and 0.7: plain, B = 1, CaDDTree; then one
# plain step's split. One process on both cores (--threads 2), 8 sets x 12 prompts, 256 tokens. Rerun with the same
# OUT to resume.
set -e
OUT="${OUT:-results/bench-intel-prefetch}" bash results/bench-intel-native/commands.sh
