"""What one sampled token costs to draw on the target's own logits: the reference law (`accept.target_probs`: sort
for top-p, then a multinomial over the vocabulary, as every tree node drew before) against `accept.sample_token`
and the CPU kernel the decoders use (`kernels.sample_processed`, sample.cpp), and the size of the top-p kept set.
Warm: rows drawn back to back; cold: a read of a buffer larger than the caches before each draw (timed alone), as
in decoding, where the draw follows a verify forward that streamed ~100 MB of weights.
Logits: SmolLM2's over a sampled chat answer (teacher-forced, one forward).
Run from the repository root: python scripts/draw_cost.py [--threads 2] > results/<run>/draw_cost.md"""
import argparse
import statistics
import time

import torch

from caddtree import kernels
from caddtree.accept import SamplingParams, sample_token, target_probs
from caddtree.engine import Decoder
from caddtree.files import cpu_name
from caddtree.target import load_target

ap = argparse.ArgumentParser()
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--tokens", type=int, default=200)
args = ap.parse_args()
torch.set_num_threads(args.threads)
target = load_target("smollm2-135m-instruct", device="cpu")
chat = [{"role": "user", "content": "Write a short story about a robot who learns to paint."}]
ids = target.tokenizer.apply_chat_template(chat, add_generation_prompt=True, return_tensors="pt")
ids = (ids["input_ids"] if hasattr(ids, "keys") else ids)[0]


def ms_per_row(draw, rows) -> float:
    t0 = time.perf_counter()
    for r in rows:
        draw(r)
    return 1000 * (time.perf_counter() - t0) / len(rows)


SWEEP = torch.ones(64 * 2**20)  # 256 MB: what a verify forward leaves in the caches, roughly


def cold_ms_per_row(draw, rows) -> float:
    total = 0.0
    for r in rows:
        SWEEP.sum()
        t0 = time.perf_counter()
        draw(r)
        total += time.perf_counter() - t0
    return 1000 * total / len(rows)


print(f"{cpu_name()}, {args.threads} thread(s), vocabulary {target.vocab_size}, {args.tokens} sampled tokens\n")
print("| setting | kept set: median / p90 / max tokens | reference draw ms | sample_token ms | kernel ms | "
      "sample_token ms, cold | kernel ms, cold |")
print("|---|---:|---:|---:|---:|---:|---:|")
for params in (SamplingParams(0.7, 0, 0.95), SamplingParams(1.0, 0, 0.95), SamplingParams(1.0)):
    out = Decoder(target).generate(ids, args.tokens, params, seed=1)
    seq = torch.cat([ids, torch.tensor(out.tokens)])
    logits, _ = target.forward(seq[:-1], target.new_cache())
    rows = logits[len(ids) - 1:]
    sizes = sorted((target_probs(rows, params) > 0).sum(-1).tolist())
    gen = torch.Generator().manual_seed(0)
    ref = ms_per_row(lambda r, p=params, g=gen: torch.multinomial(target_probs(r[None], p), 1, generator=g), rows)
    fast = ms_per_row(lambda r, p=params, g=gen: sample_token(r, p, g), rows)
    kern = ms_per_row(lambda r, p=params, g=gen: kernels.sample_processed(r, p, g), rows)
    fast_cold = cold_ms_per_row(lambda r, p=params, g=gen: sample_token(r, p, g), rows)
    kern_cold = cold_ms_per_row(lambda r, p=params, g=gen: kernels.sample_processed(r, p, g), rows)
    p90 = sizes[int(0.9 * (len(sizes) - 1))]
    print(f"| T={params.temperature} top-p={params.top_p} | {statistics.median(sizes):.0f} / {p90} / {sizes[-1]} | "
          f"{ref:.2f} | {fast:.2f} | {kern:.2f} | {fast_cold:.2f} | {kern_cold:.2f} |")
