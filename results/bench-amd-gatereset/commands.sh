#!/bin/bash
# The headline of results/bench-amd-headline run again after the draft gate's fix (commit "gate: reset per
# generation"): the gate now starts afresh on each prompt (before, one bench process carried its per-band gains from
# prompt to prompt and from dataset to dataset: MBPP inherited the skips learned on MT-Bench and AIME25, see
# results/gate-reset/), and its running mean weighs its first observations alike. Same machine (2-core AMD EPYC,
# AVX2, no AVX-512), drafter (phase 6, mix with prompt lookup), prompts, methods and settings as the earlier
# headline, and the same cost profile (--cost-model: the one that run measured), so the gate is the only change.
# Two bench processes, one per core, then the summary. Rerunning this script resumes the run where it stopped.
# Run from the repository root with the venv on PATH.
export OMP_NUM_THREADS=1
export CADDTREE_CPU_KERNEL=panel
ARGS="--drafter dflash+lookup --threads 1 --datasets math500,gsm8k,aime25,humaneval,mbpp,livecodebench,mt_bench,alpaca \
  --methods ar,ddtree:3,5,8,caddtree --num-prompts 12 --max-new-tokens 256 --temperature 0 \
  --cost-model results/bench-amd-headline/cost_model.json --out results/bench-amd-gatereset"
taskset -c 0 caddtree bench $ARGS --part 1/2 &
taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
