#!/bin/bash
# #36: the server's overhead on one SmolLM2 chat request (CaDDTree, 128 tokens, greedy, both cores) against the same
# prompt decoded in-process as `caddtree generate` does, alternating, median of 6 each (scripts/serve_overhead.py).
set -e
python scripts/serve_overhead.py --threads 2 --repeats 6 --max-tokens 128 --out "${OUT:-results/serve-overhead}"
