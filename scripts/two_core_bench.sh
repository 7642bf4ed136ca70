#!/bin/bash
# The two-core benchmark recipe that results/*/commands.sh call:
#
#   scripts/two_core_bench.sh OUT PROFILES -- BENCH_ARGS...
#
#   OUT         the run directory (passed to every `caddtree bench` as --out OUT)
#   PROFILES    "-" for none, or DRAFTER0,DRAFTER1: first `caddtree profile --drafter DRAFTERi --threads 1
#               --preset coarse` on core i, both at once (both cores busy, as during the bench)
#   BENCH_ARGS  the `caddtree bench` arguments, --out excepted
#
# Then one bench part per core (`--part 1/2` on core 0, `--part 2/2` on core 1, at once) and the summary
# (`--report`: summary.md, summary.csv, plots). OMP_NUM_THREADS=1 and CADDTREE_CPU_KERNEL=panel throughout.
# Run from the repository root with the venv on PATH. Rerunning resumes: prompts already in OUT/records*.jsonl[.gz]
# are skipped, new records are appended to OUT/records.part*.jsonl.
usage() {
  echo "usage: $0 OUT PROFILES -- BENCH_ARGS...   (PROFILES: - or DRAFTER0,DRAFTER1)" >&2
  exit 2
}
[ $# -ge 3 ] && [ "$3" = "--" ] || usage
OUT=$1
PROFILES=$2
shift 3

export OMP_NUM_THREADS=1
export CADDTREE_CPU_KERNEL=panel

if [ "$PROFILES" != "-" ]; then
  IFS=, read -r -a drafters <<< "$PROFILES"
  [ ${#drafters[@]} -le 2 ] || usage
  for core in "${!drafters[@]}"; do
    taskset -c "$core" caddtree profile --drafter "${drafters[$core]}" --threads 1 --preset coarse &
  done
  wait
fi

args=("$@" --out "$OUT")
taskset -c 0 caddtree bench "${args[@]}" --part 1/2 &
taskset -c 1 caddtree bench "${args[@]}" --part 2/2 &
wait
caddtree bench "${args[@]}" --report
