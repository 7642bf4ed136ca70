"""C_d of the shipped mix drafter (DFlash + prompt lookup), this checkout's caddtree/dflash.py against another
commit's, in one process: the variants alternate call by call on the same tokens and features, and a 600 MB buffer
is written before each call (what a verify's weight stream does to the caches between two drafts).
Usage: python results/draft-cost-ab/ab.py OLD_DFLASH_PY [rounds]"""
import importlib.util
import sys
import time

import torch

from caddtree.cli import shipped_drafter
from caddtree.drafter import LookupMixtureDrafter, PromptLookupDrafter
from caddtree.target import load_target
import caddtree.dflash as new

spec = importlib.util.spec_from_file_location("old_dflash", sys.argv[1])
old = importlib.util.module_from_spec(spec)
sys.modules["old_dflash"] = old  # its dataclasses look their module up
spec.loader.exec_module(old)
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 80
torch.set_num_threads(1)
target = load_target()
path = shipped_drafter(target)
variants = {name: LookupMixtureDrafter(mod.DFlashDrafter(mod.load_model(path, target), pack=target.packed),
                                       PromptLookupDrafter(target.vocab_size, num_positions=7))
            for name, mod in (("old", old), ("new", new))}
width = 3 * target.model.config.hidden_size
g = torch.Generator().manual_seed(0)
ids = torch.randint(0, target.vocab_size, (301,), generator=g)
feats = torch.randn(300, width, generator=g)
tokens, times, outs = {}, {k: [] for k in variants}, {}
for name, d in variants.items():
    d.reset(ids)
    d.propose(ids, feats)
    tokens[name] = ids
flush = torch.empty(150_000_000)
for _ in range(rounds):
    new_ids, new_feats = torch.randint(0, target.vocab_size, (3,), generator=g), torch.randn(3, width, generator=g)
    for name, d in variants.items():
        flush.fill_(1.0)
        tokens[name] = torch.cat([tokens[name], new_ids])
        t0 = time.perf_counter()
        outs[name] = d.propose(tokens[name], new_feats)
        times[name].append(1000 * (time.perf_counter() - t0))
for name, t in times.items():
    t.sort()
    print(f"{name}: median {t[len(t) // 2]:.2f} ms, quartiles {t[len(t) // 4]:.2f}-{t[3 * len(t) // 4]:.2f} ms "
          f"over {rounds} calls (context {tokens[name].shape[0] - 1} at the end)")
print(f"max |log-prob difference| {(outs['old'] - outs['new']).abs().max().item():.2e}, same argmax per position: "
      f"{torch.equal(outs['old'].argmax(-1), outs['new'].argmax(-1))}")
