"""Measured check of the replay: plain decoding and lookup-CaDDTree with min_ngram 1 and 2, back to back on each
prompt (order rotated per prompt), on prompts the benchmark does not use (10 .. 10 + N - 1 of each set).

Usage: python results/lookup-min-ngram/measure.py DATASETS N OUT.jsonl   (appends; finished prompts are skipped)
"""
import json
import sys
from pathlib import Path

import torch

from caddtree.bench import paired_ratio
from caddtree.datasets import load_prompts
from caddtree.drafter import PromptLookupDrafter
from caddtree.engine import Decoder
from caddtree.profile import ensure_cost_model
from caddtree.target import load_target


def main() -> None:
    datasets, n, out = sys.argv[1].split(","), int(sys.argv[2]), Path(sys.argv[3])
    torch.set_num_threads(1)
    target = load_target()
    decoders = {"ar": Decoder(target)}
    for m in (1, 2):
        d = PromptLookupDrafter(target.vocab_size, min_ngram=m)
        decoders[f"lookup-min{m}"] = Decoder(target, d, method="caddtree", cost_model=ensure_cost_model(target, d))
    done = {(r["dataset"], r["prompt_id"], r["method"]) for r in map(json.loads, out.open())} if out.exists() else set()
    for ds in datasets:
        for i, p in enumerate(load_prompts(ds, 10 + n)[10:]):
            names = list(decoders)[i % 3:] + list(decoders)[:i % 3]
            for name in names:
                if (ds, str(p["id"]), name) in done:
                    continue
                r = decoders[name].generate(target.chat_ids(p["prompt"]), 256)
                rec = {"dataset": ds, "prompt_id": str(p["id"]), "method": name, **r.summary(), "tokens": r.tokens}
                with out.open("a") as f:
                    f.write(json.dumps(rec) + "\n")
                print(ds, p["id"], name, f"{r.ms_per_token:.1f} ms/token tau {r.mean_accepted:.2f}", flush=True)
    recs = [json.loads(line) for line in out.open()]
    for ds in datasets:
        ar = {r["prompt_id"]: r["tokens"] for r in recs if r["dataset"] == ds and r["method"] == "ar"}
        exact = sum(r["tokens"] == ar.get(r["prompt_id"]) for r in recs if r["dataset"] == ds and r["method"] != "ar")
        for a, b in (("lookup-min2", "lookup-min1"), ("lookup-min1", "ar"), ("lookup-min2", "ar")):
            pr = paired_ratio(recs, ds, a, b)
            print(json.dumps({"dataset": ds, "ms_per_token_ratio": f"{a} / {b}", **pr, "exact_vs_ar": exact}))


if __name__ == "__main__":
    main()
