"""A prepared check for a machine with a CUDA GPU (no network needed; random weights): (1) the family matrix on the
GPU in fp32 and bf16 — plain, DDTree and CaDDTree decoding of tiny random Llama/Qwen2/Qwen3/Mistral/Phi3/Gemma2/Gemma3
models against a cache-free greedy reference, reported as matches (where `Target.exactness` is "not guaranteed", a
mismatch at a near-tie is possible and is counted, not hidden); (2) the verify cost C_v(n; ℓ) of a Qwen3-1.7B-shaped
random model in bf16, n up to 512, ℓ up to 4096, as a table.

    python scripts/gpu_check.py [--device cuda] [--small]     # or: bash scripts/gpu_check.sh (under 8 minutes)

--small shrinks (2) to a tiny model and short contexts: a smoke run on a CPU.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, Qwen3Config

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from conftest import OracleDrafter, RandomDrafter  # noqa: E402  (the test drafters: no training, any vocabulary)
from test_families import FAMILIES, WINDOWED, config  # noqa: E402

from caddtree.costmodel import fit_cost_model  # noqa: E402
from caddtree.engine import Decoder  # noqa: E402
from caddtree.profile import profile_verify  # noqa: E402
from caddtree.target import Target  # noqa: E402


def reference(target: Target, prompt: torch.Tensor, n: int) -> list[int]:
    seq, out = prompt.tolist(), []
    with torch.no_grad():
        for _ in range(n):
            t = int(target.model(torch.tensor([seq], device=target.device)).logits[0, -1].float().argmax())
            out.append(t)
            seq.append(t)
            if t in target.eos_ids:
                break
    return out


def family_matrix(device: str, dtype: torch.dtype) -> list[tuple]:
    rows = []
    for family in FAMILIES:
        for window in ((6, 64) if family in WINDOWED else (None,)):
            torch.manual_seed(0)
            attn = "eager" if family == "gemma2" else "sdpa"
            model = AutoModelForCausalLM.from_config(config(family, window), attn_implementation=attn)
            model = model.to(device, dtype).eval()
            model.generation_config.eos_token_id = 1
            t = Target(model=model, tokenizer=None, name=family, fingerprint=family)
            cost = fit_cost_model({"ns": [0, 1, 2, 4, 8, 16], "ctxs": [16, 256], "verify_ms": [[5, 6, 6.5, 7, 8, 10],
                                   [6, 7, 7.5, 8, 9.5, 12]], "draft_ms": [1.0, 1.2], "overhead_ms": 0.2},
                                  {"target_fingerprint": family})
            match = total = 0
            for seed in range(3):
                p = torch.randint(2, 64, (12,), generator=torch.Generator().manual_seed(seed))
                want = reference(t, p, 24)
                for dec in (Decoder(t), Decoder(t, RandomDrafter(64, seed=seed), method="ddtree", budget=8),
                            Decoder(t, OracleDrafter(t, seed=seed), method="caddtree", cost_model=cost)):
                    total += 1
                    match += dec.generate(p.to(device), 24).tokens == want
            rows.append((family, window, str(dtype).removeprefix("torch."), match, total, t.exactness))
    return rows


def verify_costs(device: str, small: bool) -> dict:
    shape = (dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, vocab_size=1000) if small else
             dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
                  num_key_value_heads=8, head_dim=128, vocab_size=151936))  # Qwen3-1.7B
    cfg = Qwen3Config(**shape, max_position_embeddings=8192, tie_word_embeddings=True)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").to(device, torch.bfloat16).eval()
    t = Target(model=model, tokenizer=None, name="qwen3-1.7b-shape", fingerprint="random")
    ns = [0, 1, 4, 16, 64] if small else [0, 1, 4, 16, 32, 64, 128, 256, 512]
    ctxs = [128, 512] if small else [128, 1024, 4096]
    return profile_verify(t, ns, ctxs, repeats=3, warmup=1, progress=False)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--small", action="store_true")
    args = p.parse_args()
    name = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else args.device
    print(f"# gpu_check on {name}, torch {torch.__version__}\n")
    t0 = time.perf_counter()
    print("| family | window | dtype | matches plain greedy | exactness |\n|---|---:|---|---:|---|")
    for dtype in (torch.float32, torch.bfloat16):
        for family, window, dt, match, total, exact in family_matrix(args.device, dtype):
            print(f"| {family} | {window or '-'} | {dt} | {match}/{total} | {exact} |", flush=True)
    meas = verify_costs(args.device, args.small)
    print(f"\nC_v(n; ℓ) ms, {'tiny' if args.small else 'Qwen3-1.7B-shaped'} random model, bf16 "
          f"({time.perf_counter() - t0:.0f} s so far)\n")
    print("| ℓ \\ n | " + " | ".join(str(n) for n in meas["ns"]) + " |\n|---|" + "---:|" * len(meas["ns"]))
    for ctx, row in zip(meas["ctxs"], meas["verify_ms"]):
        print(f"| {ctx} | " + " | ".join(f"{v:.2f}" for v in row) + " |")
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
