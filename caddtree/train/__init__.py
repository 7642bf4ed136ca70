"""Training a DFlash drafter on its target's own greedy responses, and measuring its acceptance length τ.

    caddtree train-drafter --stage data  --out runs/dflash   # appends shards, resumes where it stopped
    caddtree train-drafter --stage train --out runs/dflash   # resumes from runs/dflash/ckpt.pt if present
    caddtree eval-drafter --drafter caddtree/drafters/smollm2-135m-instruct-dflash

config (hyperparameters), data (prompts and shards), loop (optimisation), evaluate (τ), command (the CLI).
"""
