#!/bin/bash
# On a machine with a CUDA GPU and this repository's venv (no network): the family matrix on CUDA in fp32 and bf16
# and a verify-cost table of a Qwen3-1.7B-shaped random model in bf16 (scripts/gpu_check.py), within 8 minutes.
set -e
cd "$(dirname "$0")/.."
exec timeout 480 "${PYTHON:-.venv/bin/python}" scripts/gpu_check.py --device "${DEVICE:-cuda}" "$@"
