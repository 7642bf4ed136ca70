#!/bin/bash
# results/zen5-lean/commands.sh again right after it (same code, prompts, methods, --repeats 2, a fresh profile), to
# combine both runs with results/combine_runs.py. Run from the repository root with the venv on PATH.
OUT=${OUT:-results/zen5-lean2} bash results/zen5-current/commands.sh
