#!/bin/bash
# #37 on the AMD EPYC (AVX-512): bench-amd512-overhead's command rerun on the fixed profile (d8c1d76, run on
# dbedf58): the round's overhead priced o(ℓ) + o_n · n (profile.py) against the old pricing of the same profile
# (caddtree@fullbuild: the full-budget build charged to every round). One process on both cores (--threads 2),
# 8 sets x 12 prompts, 256 tokens, default drafter (dflash+lookup). Sampled (top-p 0.95, seed 0) at T = 1.0 and 0.7:
# plain, B = 1, CaDDTree, CaDDTree@fullbuild; greedy: plain, CaDDTree, @fullbuild (outputs must equal
# bench-amd512-native4/t0's). The cost profile is measured first. A rerun with the same OUT resumes.
set -e
OUT="${OUT:-results/bench-amd512-overhead2}" bash results/bench-amd512-overhead/commands.sh  # the same command
