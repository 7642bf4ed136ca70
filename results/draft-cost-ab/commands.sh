#!/bin/bash
# The DFlash drafter's round cost before (9c2542c) and after grouped-query attention without K/V copies and a cached
# rope table (caddtree/dflash.py), in one process, alternating call by call (ab.py): first with the other core idle,
# then with the other core streaming memory as a second bench process does. Run from the repository root with the
# venv on PATH; writes output.txt here.
export OMP_NUM_THREADS=1
export CADDTREE_CPU_KERNEL=panel
OUT=results/draft-cost-ab/output.txt
git show 9c2542c:caddtree/dflash.py > /tmp/dflash_9c2542c.py
{ echo "# other core idle"; taskset -c 0 python results/draft-cost-ab/ab.py /tmp/dflash_9c2542c.py; } 2>>/tmp/draft-cost-ab.err > $OUT
taskset -c 1 python -c "
import time, torch
torch.set_num_threads(1)
x, t = torch.empty(150_000_000), time.time()
while time.time() - t < 90: x.fill_(1.0)" &
{ echo "# other core streaming memory"; taskset -c 0 python results/draft-cost-ab/ab.py /tmp/dflash_9c2542c.py; } 2>>/tmp/draft-cost-ab.err >> $OUT
wait
cat $OUT
