"""The target's greedy references and a drafter's acceptance length τ against them.

τ = tokens emitted / rounds, where a round emits the accepted draft prefix plus one bonus token (the target's own
next token), so τ >= 1 and a perfect linear block of L positions gives τ = L + 1. With greedy decoding the target's
choice at a node of depth d is the reference's token d after the root, so acceptance needs no target forward: the
reference is the oracle. pos_accept[k] = P(depth k accepted | depth k-1 accepted).

Feature rows: row t of a sequence's features holds the target's hidden states (the m context layers, concatenated) at
token t; the last row is zero, as a token's features are context only for the tokens after it.
"""
from __future__ import annotations

from pathlib import Path

import torch

from caddtree.accept import accept_walk
from caddtree.datasets import load_prompts
from caddtree.dflash import DFlashConfig, DFlashDrafter, DFlashModel, check_target, load_drafter
from caddtree.errors import CaddtreeError
from caddtree.files import atomic_write, cache_dir
from caddtree.tree import build_tree
from caddtree.verify import now


def _pad_id(target) -> int:
    eos = sorted(target.eos_ids)
    tok = target.tokenizer
    return next(p for p in (getattr(tok, "pad_token_id", None), target.config.pad_token_id, *eos, 0) if p is not None)


def greedy_batch(target, prompts: list[list[int]], layers: list[int], max_new_tokens: int):
    """The target's greedy responses to a batch of prompts (token ids), left-padded into one HF `generate` call, and
    the target features of every prompt and response token.

    Returns ([(response ids incl. the EOS token if reached, feats fp32 [T, m*H])], generation steps); row t of feats
    holds the features of token t of prompt + response; the last row is zero (it is never used as context).
    """
    eos = sorted(target.eos_ids)
    pad = _pad_id(target)
    P = max(len(x) for x in prompts)
    inp = torch.full((len(prompts), P), pad, dtype=torch.long)
    att = torch.zeros((len(prompts), P), dtype=torch.long)
    for b, x in enumerate(prompts):
        inp[b, P - len(x):] = torch.tensor(x)
        att[b, P - len(x):] = 1
    with torch.inference_mode():
        # our cache grows in place (HF's DynamicCache copies every layer at every step)
        g = target.model.generate(input_ids=inp.to(target.device), attention_mask=att.to(target.device),
                                  max_new_tokens=max_new_tokens, do_sample=False, output_hidden_states=True,
                                  return_dict_in_generate=True, pad_token_id=pad, eos_token_id=eos or None,
                                  cache=target.new_cache())
    seqs = g.sequences.cpu()  # [b, P + S]
    # hidden_states: step 0 -> tuple(layers + 1) of [b, P, H]; step s > 0 -> [b, 1, H] (the token fed at step s)
    feats_all = torch.cat([torch.cat([h[k + 1] for k in layers], -1) for h in g.hidden_states], 1).float().cpu()
    del g  # feats_all [b, P + S - 1, m*H]
    out = []
    for b, x in enumerate(prompts):
        resp = seqs[b, P:].tolist()
        resp = resp[:next((j + 1 for j, t in enumerate(resp) if t in eos), len(resp))]  # keep the EOS token
        T = len(x) + len(resp)
        f = torch.zeros(T, feats_all.shape[-1])
        f[:T - 1] = feats_all[b, P - len(x):P - len(x) + T - 1]
        out.append((resp, f))
    return out, seqs.shape[1] - P


def greedy_references(target, prompts: list[str], layers: list[int], max_new_tokens: int = 256,
                      batch_size: int = 10):
    """The target's greedy responses and features: list of (tokens [T], prompt_len, feats fp32 [T, F])."""
    refs = []
    for i in range(0, len(prompts), batch_size):
        batch = [target.chat_ids(p).tolist() for p in prompts[i:i + batch_size]]
        results, _ = greedy_batch(target, batch, layers, max_new_tokens)
        refs += [(torch.tensor(x + resp), len(x), f) for x, (resp, f) in zip(batch, results)]
    return refs


def _accepted(lp: torch.Tensor, truth: list[int], budget: int | None) -> int:
    """Draft tokens accepted against the reference continuation `truth`: the linear block's argmax (budget None) or
    the best-first tree of `budget` nodes, walked along the greedy path."""
    if budget is None:
        draft, a = lp.argmax(-1).tolist(), 0
        while a < len(truth) and draft[a] == truth[a]:
            a += 1
        return a
    tree = build_tree(lp, budget)
    # the target's greedy choice at a node of depth d is truth[d] (-1: past the reference's end)
    choices = [truth[d] if d < len(truth) else -1 for d in [0] + tree.depths.tolist()]
    return len(accept_walk(tree.tokens, tree.parents, torch.tensor(choices))[0])


def evaluate(drafter, refs, budget: int | None = None) -> dict:
    """Acceptance length τ (bonus counted) against the target's greedy continuation `refs`.

    budget None: a linear block (the drafter's argmax per position); budget n: the best-first tree of n nodes
    (caddtree.tree.build_tree), accepted along the greedy path. Each round emits the accepted prefix + 1 bonus token.
    Also per-position acceptance rates (P(depth k accepted | depth k-1 accepted)) and the drafter's cost per round."""
    L = drafter.num_positions
    rounds = emitted = 0
    reach, acc = [0] * L, [0] * L
    times = []
    for toks, P, feats in refs:
        dev = drafter.model.fc.weight.device
        toks, feats = toks.to(dev), feats.to(dev)
        T = toks.shape[0]
        drafter.reset(toks[:P])
        c, prev = P - 1, 0  # c = root index
        while c < T - 1:
            t0 = now(dev)  # synchronises on CUDA: time the drafter's work, not its launch
            lp = drafter.propose(toks[:c + 1], feats[prev:c])
            times.append(now(dev) - t0)
            prev = c
            remaining = T - 1 - c
            truth = toks[c + 1:c + 1 + min(L, remaining)].tolist()
            a = _accepted(lp, truth, budget)
            for k in range(min(a + 1, len(truth))):
                reach[k] += 1
                acc[k] += k < a
            e = min(a + 1, remaining)
            rounds += 1
            emitted += e
            c += e
    times.sort()
    return {"tau": round(emitted / max(1, rounds), 3), "rounds": rounds, "tokens": emitted,
            "pos_accept": [round(x / r, 3) if r else None for x, r in zip(acc, reach)],
            "drafter_ms_median": round(1000 * times[len(times) // 2], 2) if times else None}


def _drafter_from(path, target):
    """A drafter from an exported directory or a training checkpoint (`out/ckpt.pt`)."""
    path = Path(path)
    if path.suffix != ".pt":
        return load_drafter(path, target)
    if not path.is_file():
        raise CaddtreeError(f"checkpoint {path} not found: pass a drafter directory or a checkpoint .pt from "
                            f"`caddtree train-drafter --out DIR`")
    try:
        ck = torch.load(path, weights_only=False)
        c = DFlashConfig(**ck["config"])
    except Exception as e:  # noqa: BLE001  pickle/zip errors of a truncated or foreign file
        raise CaddtreeError(f"{path} is not a caddtree training checkpoint ({type(e).__name__}): pass a drafter "
                            f"directory or a checkpoint .pt from `caddtree train-drafter --out DIR`") from None
    check_target(c, target, where=f"checkpoint {path}")
    m = DFlashModel(c)
    m.load_state_dict(ck["model"])
    return DFlashDrafter(m.bind(target))


def eval_references(target, ddir, name: str, n: int, max_new_tokens: int, layers: list[int]):
    """Greedy references for the first n prompts of an eval set, cached in the user cache (they cost minutes); a
    cache of fewer prompts is extended, not recomputed."""
    root = cache_dir() / "eval_refs"
    layer_tag = "-".join(map(str, layers))
    key = lambda k: root / f"{target.fingerprint}_bench-{name}_{k}_{max_new_tokens}_{layer_tag}.pt"  # noqa: E731
    if key(n).is_file():
        return torch.load(key(n), weights_only=False)
    have = next((k for k in range(n - 1, 0, -1) if key(k).is_file()), 0)
    refs = torch.load(key(have), weights_only=False) if have else []
    prompts = [x["prompt"] for x in load_prompts(name, n, data_dir=ddir)]  # the bench's prompts and formats
    refs += greedy_references(target, prompts[have:], layers, max_new_tokens)
    atomic_write(key(n), lambda tmp: torch.save(refs, tmp))
    return refs
