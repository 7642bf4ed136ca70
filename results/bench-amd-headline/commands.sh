#!/bin/bash
# The headline on a 2-core AMD EPYC with AVX2 but no AVX-512 (a different machine from the AVX-512 AMD EPYC of
# results/bench-t0-256-n20), with what ships now: the phase-6 DFlash drafter, the monotone C_v fit, and the panel
# kernel sized to this CPU's 16 ymm registers (16-column panels; with the 64-column panels of AVX-512 it spilled and
# a 5-node verify cost 5.6x a plain step here, results/kernels-avx2/). 8 sets x 12 prompts, 256 tokens, greedy, two
# bench processes, one per core, --threads 1, the mix drafter (DFlash + prompt lookup), the methods of a prompt in
# alternating order: plain decoding, fixed budgets 3/5/8 (this CPU's verify curve is flatter per row than the
# AVX-512 machines', so the oracle may sit elsewhere) and CaDDTree. Profiles first (both cores busy, as in the run),
# then one part per core, then the summary. Rerunning this script resumes the run where it stopped. Run from the
# repository root with the venv on PATH.
export OMP_NUM_THREADS=1
export CADDTREE_CPU_KERNEL=panel
taskset -c 0 caddtree profile --drafter dflash+lookup --threads 1 --preset coarse &
taskset -c 1 caddtree profile --drafter lookup --threads 1 --preset coarse &
wait
ARGS="--drafter dflash+lookup --threads 1 --datasets math500,gsm8k,aime25,humaneval,mbpp,livecodebench,mt_bench,alpaca \
  --methods ar,ddtree:3,5,8,caddtree --num-prompts 12 --max-new-tokens 256 --temperature 0 \
  --out results/bench-amd-headline"
taskset -c 0 caddtree bench $ARGS --part 1/2 &
taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
