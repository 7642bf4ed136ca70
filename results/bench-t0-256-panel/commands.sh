#!/bin/bash
# The headline run with the panel kernel (caddtree/panel_linear.cpp, kernel version panel1) and the realised-gain
# draft gate, on this session's machine (2 cores, Intel Xeon with AVX-512; earlier headlines ran on an AMD EPYC
# machine). Same prompts and settings as results/bench-t0-256-phase3, without `caddtree@nogate`. One part per core,
# then the combined summary. Rerunning this script resumes the run where it stopped. Run from the repository root
# with the venv on PATH. No llama.cpp peer: llama-cpp-python 0.3.36 built on this machine crashes in libggml-cpu.so
# (general protection fault) on its first generated token, outside caddtree too; the first attempt of this run died there.
export OMP_NUM_THREADS=1
# cost profiles first, one per drafter, both cores busy as during the run (cached per machine, drafter and kernels)
taskset -c 0 caddtree profile --drafter dflash+lookup --threads 1 --preset coarse &
taskset -c 1 caddtree profile --drafter lookup --threads 1 --preset coarse &
wait
ARGS="--drafter dflash+lookup --threads 1 --datasets math500,gsm8k,aime25,humaneval,mbpp,livecodebench,mt_bench,alpaca \
  --methods ar,ddtree:4,8,16,caddtree,lookup-caddtree,hf,hf-lookup --num-prompts 10 \
  --max-new-tokens 256 --temperature 0 --out results/bench-t0-256-panel"
taskset -c 0 caddtree bench $ARGS --part 1/2 &
taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
