#!/bin/bash
# The headline run with the panel kernel (caddtree/panel_linear.cpp, kernel version panel1) and the realised-gain
# draft gate, on the machine of 2026-12-01 (2 cores, Intel Xeon with AVX-512; earlier headlines ran on an AMD EPYC
# machine). Same prompts and settings as results/bench-t0-256-phase3, without `caddtree@nogate`. One part per core,
# then the combined summary. Rerunning this script resumes the run where it stopped. Run from the repository root
# with the venv on PATH.
# llama.cpp peer: llama-cpp-python 0.3.36 built with its default -march=native crashed on this machine in
# libggml-cpu.so (general protection fault) on its first token, also outside caddtree, and took the first attempt's
# two bench processes down. Built with CMAKE_ARGS="-DGGML_NATIVE=OFF" it runs. How this run was made:
#   05:16-05:18  profiles + first attempt with llamacpp (16 records, then the crash)
#   05:25-06:20  resumed without llamacpp (all other methods, 640 records)
#   06:39-06:44  llama-cpp-python rebuilt with GGML_NATIVE=OFF, resumed with llamacpp (its 80 records only: not back
#                to back with the other methods, so its speed-up compares medians taken ~30 minutes apart)
export OMP_NUM_THREADS=1
# CMAKE_ARGS="-DGGML_NATIVE=OFF" pip install --no-cache-dir --force-reinstall --no-deps llama-cpp-python==0.3.36
# cost profiles first, one per drafter, both cores busy as during the run (cached per machine, drafter and kernels)
taskset -c 0 caddtree profile --drafter dflash+lookup --threads 1 --preset coarse &
taskset -c 1 caddtree profile --drafter lookup --threads 1 --preset coarse &
wait
ARGS="--drafter dflash+lookup --threads 1 --datasets math500,gsm8k,aime25,humaneval,mbpp,livecodebench,mt_bench,alpaca \
  --methods ar,ddtree:4,8,16,caddtree,lookup-caddtree,hf,hf-lookup,llamacpp --num-prompts 10 \
  --max-new-tokens 256 --temperature 0 --out results/bench-t0-256-panel"
taskset -c 0 caddtree bench $ARGS --part 1/2 &
taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
