#!/bin/bash
# #35: one plain step of a Gemma3-270M-shaped model (its published config, random weights, fp32; SmolLM2's tokenizer
# stands in, the step's ids are fixed) through the lean forward's C++ layer loop, HF's forward on the same kernels,
# and HF as loaded. Run from the repository root with the venv on PATH; the model is written to $DIR (~1 GB).
set -e
DIR="${DIR:-/tmp/gemma3-270m-shape}"
OUT="${OUT:-results/step-gemma3-270m-shape}"
python - "$DIR" <<'PY'
import glob, shutil, sys
import torch
from transformers import AutoModelForCausalLM, Gemma3TextConfig
from caddtree.target import load_target
torch.manual_seed(0)
cfg = Gemma3TextConfig(vocab_size=262144, hidden_size=640, intermediate_size=2048, num_hidden_layers=18,
                       num_attention_heads=4, num_key_value_heads=1, head_dim=256, query_pre_attn_scalar=256,
                       sliding_window=512, layer_types=(["sliding_attention"] * 5 + ["full_attention"]) * 3,
                       max_position_embeddings=32768, tie_word_embeddings=True)
AutoModelForCausalLM.from_config(cfg).save_pretrained(sys.argv[1])
load_target("smollm2-135m-instruct").tokenizer.save_pretrained(sys.argv[1])
PY
for ctx in 300 1000; do  # 1000: past the 512-token window
  python scripts/step_profile.py --target "$DIR" --ctx $ctx --threads 2 --steps 30 | grep -v "n/a"
done > "$OUT/step_profile.md"
