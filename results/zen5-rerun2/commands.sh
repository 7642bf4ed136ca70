#!/bin/bash
# results/zen5-current/commands.sh a third time, right after results/zen5-rerun/ (profiled afresh), into this folder.
# Run from the repository root with the venv on PATH. Then both sound-profile runs as one:
#   python results/combine_runs.py results/zen5-rerun2/both results/zen5-rerun results/zen5-rerun2
OUT=${OUT:-results/zen5-rerun2} bash results/zen5-current/commands.sh
