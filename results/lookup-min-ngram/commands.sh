#!/bin/bash
# Predicted ms/token of lookup-CaDDTree for min_ngram 1/2/3, replayed on recorded greedy outputs (see replay.py).
# Needs the records of results/bench-t0-256-full and the eval references of `caddtree eval-drafter --n 20`.
export OMP_NUM_THREADS=1
python results/lookup-min-ngram/replay.py bench math500,gsm8k,aime25,humaneval,mbpp,livecodebench,mt_bench,alpaca 1 2 3 \
  > results/lookup-min-ngram/replay.jsonl
python results/lookup-min-ngram/replay.py refs gsm8k,math500,humaneval,mbpp,mt_bench,alpaca 1 2 3 \
  >> results/lookup-min-ngram/replay.jsonl
# measured check on prompts 10-15 (decides; resumes): plain, min_ngram 1 and 2 back to back per prompt
taskset -c 1 python results/lookup-min-ngram/measure.py humaneval,gsm8k,math500,mt_bench 6 results/lookup-min-ngram/measured.jsonl \
  > results/lookup-min-ngram/measured.log
