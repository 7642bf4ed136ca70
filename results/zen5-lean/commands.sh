#!/bin/bash
# The headline comparison of results/zen5-current/commands.sh (same 8 x 15 prompts, methods, --repeats 2, fresh
# profile) after the cut in CaDDTree's per-round policy cost (stage 1 read as SparseMarginals, TreeStop's loop, one
# blended C_v table) and with a round's time covering all its work. Run from the repository root with the venv on PATH.
OUT=${OUT:-results/zen5-lean} bash results/zen5-current/commands.sh
