#!/bin/bash
# The headline with the shipped code (commit c418396: the prompt lookup calibrated per match length, the gate reset
# per generation, the phase-6 DFlash drafter, panel kernel `panel2`) on a 2-core AMD EPYC with AVX-512 (family 25
# model 17, KVM guest; 64-column panels), the machine type of results/bench-t0-256-n20/ (there: phase-4 drafter,
# kernel `panel1`). 8 sets x 30 prompts (the first 12 are the earlier headlines'), 256 new tokens, greedy, --threads
# 1, the mix drafter (DFlash + prompt lookup); plain decoding, fixed budgets 3/4/5/8 (the oracle sat at 4-5 on this
# CPU), CaDDTree, and CaDDTree without the draft gate (both stages every round) to measure what the gate does on its
# own trajectory. Profiles first (both cores busy, as in the run), then one bench part per core, then the summary.
# Rerunning this script resumes the run where it stopped. Run from the repository root with the venv on PATH.
# As run: this script with --num-prompts 12 (19:56-20:39 UTC 2026-12-02), then its two bench lines and --report again
# with --num-prompts 20 (21:22-21:51 UTC; no new profile, the cached one of 19:56 was loaded), which added prompts
# 13-20 of each set, then with --num-prompts 30 (22:20-22:5x UTC, same cached profile, code c418396 plus a change
# to profile rebuilding only), which added prompts 21-30. This script asks for 30 at once.
# The two concurrent profile commands below both re-measured the shared verify profile, so with the code as run
# each bench part then re-measured C_d for its own use (see README.md here). Since the change above a drafter
# profile built on an older verify profile is refitted on the newer one with its own C_d kept: both parts now load
# one model.
export OMP_NUM_THREADS=1
export CADDTREE_CPU_KERNEL=panel
OUT=${OUT:-results/bench-amd512-shipped}
taskset -c 0 caddtree profile --drafter dflash+lookup --threads 1 --preset coarse &
taskset -c 1 caddtree profile --drafter lookup --threads 1 --preset coarse &
wait
ARGS="--drafter dflash+lookup --threads 1 --datasets math500,gsm8k,aime25,humaneval,mbpp,livecodebench,mt_bench,alpaca \
  --methods ar,ddtree:3,4,5,8,caddtree,caddtree@nogate --num-prompts 30 --max-new-tokens 256 --temperature 0 \
  --out $OUT"
taskset -c 0 caddtree bench $ARGS --part 1/2 &
taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
