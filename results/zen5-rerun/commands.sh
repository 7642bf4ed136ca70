#!/bin/bash
# results/zen5-current/commands.sh again (same sets, prompts, methods, --repeats 2, profile first with both cores
# busy), into this folder, with the code of ad221ad (the profile's busy check: more sweeps while the timings stand
# > 15% above their fastest), after the profile zen5-current decoded with turned out disturbed
# (results/counterfactual/zen5/). Run from the repository root with the venv on PATH.
OUT=${OUT:-results/zen5-rerun} bash results/zen5-current/commands.sh
