#!/bin/bash
# CaDDTree against the two best fixed budgets with each prompt's methods run twice (`--repeats 2`: the second time in
# reverse order; a record keeps the faster run). In results/bench-t0-256-n20 single runs were that noisy: on
# HumanEval/13 the 4- and 5-node trees reached the same tau (2.50) at 20.2 and 27.5 ms/token, where the extra row
# costs ~5%; the per-set oracle verdict followed such bursts. Same 8 sets x 20 prompts, 256 tokens, greedy, mix
# drafter + gate; fixed budgets 4 and 5 (the oracle on every set of bench-t0-256-n20; B=8 was 13% slower pooled) and
# CaDDTree; no plain decoding (its tokens and the speed-ups are in bench-t0-256-n20; exact.py compares the outputs
# with it). Code of 7d6795b (the decoding code of bench-t0-256-n20). Profiles first (both cores busy, as in the
# run), then one part per core, then the summary. Rerunning resumes. Run from the repository root with the venv on
# PATH.
export OMP_NUM_THREADS=1
export CADDTREE_CPU_KERNEL=panel
taskset -c 0 caddtree profile --drafter dflash+lookup --threads 1 --preset coarse &
taskset -c 1 caddtree profile --drafter lookup --threads 1 --preset coarse &
wait
ARGS="--drafter dflash+lookup --threads 1 --datasets math500,gsm8k,aime25,humaneval,mbpp,livecodebench,mt_bench,alpaca \
  --methods ddtree:4,5,caddtree --num-prompts 20 --repeats 2 --max-new-tokens 256 --temperature 0 \
  --out results/bench-t0-256-n20r"
taskset -c 0 caddtree bench $ARGS --part 1/2 &
taskset -c 1 caddtree bench $ARGS --part 2/2 &
wait
caddtree bench $ARGS --report
