"""Training data: the target's own greedy responses to training prompts, with the target features of every token.

Prompts come from the training sets only; the evaluation sets (GSM8K test, MATH-500, HumanEval, MBPP 11-510,
MT-Bench, AlpacaEval) are never trained on. Responses and features are captured from the same `generate` call, so no
second feature pass is needed.

Layout of a work dir `out/`:
    data/meta.json          target name, fingerprint, target_layers, prompt/response caps: every shard's provenance
    data/shard_XXXXX.pt     tokens (list of int32 [T]), prompt_len (list of int), feats (list of bf16 [T, m*H]),
                            source (list of str), start, count (the shuffled prompts [start, start + count) it covers)
Row t of feats = the target features of token t; the last row is zero (it is never context). Shards are written
atomically and numbered in order, so a run stopped at any moment resumes after its last whole shard.
"""
from __future__ import annotations

import glob
import json
import random
import time
from pathlib import Path

import numpy as np
import torch

from caddtree.datasets import read_records
from caddtree.dflash import default_target_layers
from caddtree.errors import CaddtreeError
from caddtree.files import atomic_write
from caddtree.train.evaluate import greedy_batch


# ----------------------------------------------------------------------------------------------------- prompts
def _instr(r: dict) -> str:
    extra = (r.get("input") or "").strip()
    return r["instruction"].strip() + ("\n\n" + extra if extra else "")


def train_prompts(ddir: Path, seed: int = 0) -> list[tuple[str, str]]:
    """(source, prompt) pairs from the training sets only, shuffled with a fixed seed (any prefix is a fair mix)."""
    out = []
    try:
        out += [("gsm8k", r["question"]) for r in read_records(ddir / "gsm8k/train.jsonl")]
        for name, rel in (("codegen", "gpteacher/Codegen/codegen-instruct.json"),
                          ("roleplay", "gpteacher/Roleplay/roleplay-simple-deduped-roleplay-instruct.json"),
                          ("alpaca", "alpaca/alpaca_data_cleaned_1000.json"),
                          ("codealpaca", "codealpaca/code_alpaca_2k.json")):
            out += [(name, _instr(r)) for r in read_records(ddir / rel)]
        for r in read_records(ddir / "mbpp/mbpp.jsonl"):  # MBPP train ids only: 1-10, 511-974 (11-510: the test split)
            if 1 <= int(r["task_id"]) <= 10 or 511 <= int(r["task_id"]) <= 974:
                out.append(("mbpp", r["text"].strip() + "\nYour code should pass this test:\n" + r["test_list"][0]))
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        raise CaddtreeError(f"a training-prompt record in {ddir} lacks a usable field ({type(e).__name__}: {e}): "
                            f"lay the data dir out as shared/data/MANIFEST.md describes") from None
    random.Random(seed).shuffle(out)
    return out


# ----------------------------------------------------------------------------------------------------- shards
def _shards(out: Path) -> list[Path]:
    return sorted(Path(p) for p in glob.glob(str(out / "data" / "shard_*.pt")))


def _new_shard(start: int, count: int) -> dict:
    return {"tokens": [], "prompt_len": [], "feats": [], "source": [], "start": start, "count": count}


def _add_seq(shard: dict, tokens: torch.Tensor, prompt_len: int, feats: torch.Tensor, source: str) -> None:
    shard["tokens"].append(tokens)
    shard["prompt_len"].append(prompt_len)
    shard["feats"].append(feats.to(torch.bfloat16))
    shard["source"].append(source)


def _save_shard(shard: dict, path: Path) -> None:
    atomic_write(path, lambda tmp: torch.save(shard, tmp))


def _write_meta(out: Path, meta: dict) -> None:
    """out/data/meta.json, after checking that shards already there come from the same target and layers."""
    (out / "data").mkdir(parents=True, exist_ok=True)
    path = out / "data" / "meta.json"
    if path.is_file():
        old = json.loads(path.read_text())
        if old["fingerprint"] != meta["fingerprint"] or old["target_layers"] != meta["target_layers"]:
            raise CaddtreeError(f"{out}/data was generated for another target/layers; use a fresh --out")
    path.write_text(json.dumps(meta, indent=1))


def _prompts_done(out: Path, first_prompt: int) -> int:
    """Shuffled prompts already covered: by the shards in out/data, or (first_prompt > 0) by an earlier run whose
    shards are elsewhere."""
    done = first_prompt
    for s in _shards(out):
        m = torch.load(s, weights_only=False)
        done = max(done, m["start"] + m["count"])
    return done


def _chat_items(target, chunk: list[tuple[str, str]], max_prompt_tokens: int) -> list[tuple[str, list[int]]]:
    """(source, chat token ids) of the prompts within the cap, grouped by source and length (less padding)."""
    items = [(src, target.chat_ids(p).tolist()) for src, p in chunk]
    return sorted((x for x in items if len(x[1]) <= max_prompt_tokens), key=lambda x: (x[0], len(x[1])))


def _generate_shard(target, items: list[tuple[str, list[int]]], start: int, count: int, layers: list[int],
                    batch_size: int, max_new_tokens: int) -> tuple[dict, dict]:
    """One shard of greedy responses to `items`, and its counts (sequences, new tokens, generation steps)."""
    shard = _new_shard(start, count)
    n_new, n_steps = 0, 0
    for i in range(0, len(items), batch_size):
        batch = items[i:i + batch_size]
        results, steps = greedy_batch(target, [x for _, x in batch], layers, max_new_tokens)
        n_steps += steps
        for (src, x), (resp, f) in zip(batch, results):
            n_new += len(resp)
            _add_seq(shard, torch.tensor(x + resp, dtype=torch.int32), len(x), f, src)
    return shard, {"seqs": len(items), "new_tokens": n_new, "gen_steps": n_steps}


def generate_data(target, out: Path, ddir: Path, max_prompts: int = 100000, batch_size: int = 32,
                  max_prompt_tokens: int = 256, max_new_tokens: int = 256, max_minutes: float = 1e9, group: int = 4,
                  target_layers: list[int] | None = None, first_prompt: int = 0, log=print) -> None:
    """Greedy target responses + their target features, appended as shards `data/shard_XXXXX.pt`; resumes.

    Each shard: tokens (list of int32 [T]), prompt_len (list of int), feats (list of bf16 [T, m*H]; row t = target
    features of token t, the last row is zero: it is never used as context), sources, prompt indices.
    """
    layers = target_layers or default_target_layers(target.config.num_hidden_layers)
    _write_meta(out, {"target": target.name, "fingerprint": target.fingerprint, "target_layers": layers,
                      "max_prompt_tokens": max_prompt_tokens, "max_new_tokens": max_new_tokens})
    prompts = train_prompts(ddir)[:max_prompts]
    done = _prompts_done(out, first_prompt)
    t_start = time.time()
    window = batch_size * group  # one shard per window; inside it, batches are grouped by source and length
    while done < len(prompts) and (time.time() - t_start) / 60 < max_minutes:
        chunk = prompts[done:done + window]
        items = _chat_items(target, chunk, max_prompt_tokens)
        t0 = time.time()
        shard, counts = _generate_shard(target, items, done, len(chunk), layers, batch_size, max_new_tokens)
        dt = time.time() - t0
        k = len(_shards(out))
        _save_shard(shard, out / "data" / f"shard_{k:05d}.pt")
        done += len(chunk)
        log(json.dumps({"event": "data", "shard": k, "prompts_done": done, **counts, "sec": round(dt, 1),
                        "tok_s": round(counts["new_tokens"] / dt, 1), "time": time.strftime("%H:%M:%S")}))


# ----------------------------------------------------------------------------------------------------- token archive
def save_tokens(out: Path, path: Path) -> int:
    """The token ids of every shard in out/data, without their features, into one compressed file (~2 bytes per
    token): what a later session needs to rebuild the shards (`load_tokens`) instead of regenerating the responses.
    Returns the number of sequences."""
    if not _shards(out):
        raise CaddtreeError(f"no training data in {out}/data: nothing to save")
    meta = json.loads((out / "data" / "meta.json").read_text())
    toks, lens, plens, shard, sources, starts, counts = [], [], [], [], [], [], []
    for k, sp in enumerate(_shards(out)):
        m = torch.load(sp, weights_only=False)
        starts.append(m["start"]), counts.append(m["count"])
        for t, pl, src in zip(m["tokens"], m["prompt_len"], m["source"]):
            toks.append(t.numpy()), lens.append(len(t)), plens.append(pl), shard.append(k), sources.append(src)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:  # a file object: np.savez would otherwise append .npz to the name
        np.savez_compressed(f, tokens=np.concatenate(toks).astype(np.int32), lengths=np.array(lens),
                            prompt_len=np.array(plens), shard=np.array(shard), source=np.array(sources),
                            shard_start=np.array(starts), shard_count=np.array(counts), meta=json.dumps(meta))
    return len(lens)


def _rebuild_shard(target, z, seqs: list[torch.Tensor], k: int) -> dict:
    """Shard k of a token archive, its features recomputed by one target forward per sequence."""
    shard = _new_shard(int(z["shard_start"][k]), int(z["shard_count"][k]))
    for i in np.flatnonzero(z["shard"] == k):
        with torch.inference_mode():
            _, f = target.forward(seqs[i].long().to(target.device), target.new_cache())
            f[-1] = 0  # as generated: the last token's features are never context
        _add_seq(shard, seqs[i], int(z["prompt_len"][i]), f.cpu(), str(z["source"][i]))
    return shard


def load_tokens(target, path: Path, out: Path, log=print) -> None:
    """Rebuild the shards of a `save_tokens` file in out/data, the target features recomputed by one forward per
    sequence (a few times faster than generating the responses again); shards already there are kept (resumes)."""
    if not path.is_file():
        raise CaddtreeError(f"token archive {path} not found (made by `caddtree train-drafter --stage save-tokens`)")
    z = np.load(path)
    meta = json.loads(str(z["meta"]))
    if meta["fingerprint"] != target.fingerprint:
        raise CaddtreeError(f"{path} holds responses of target {meta['target']} ({meta['fingerprint']}), not of "
                            f"{target.name} ({target.fingerprint}): load it with that target")
    _write_meta(out, meta)
    target.hidden_layers = list(meta["target_layers"])
    ends = np.cumsum(z["lengths"])
    seqs = [torch.from_numpy(z["tokens"][e - n:e].copy()) for e, n in zip(ends, z["lengths"])]
    for k in range(len(z["shard_start"])):
        sp = out / "data" / f"shard_{k:05d}.pt"
        if sp.is_file():
            continue
        t0 = time.time()
        shard = _rebuild_shard(target, z, seqs, k)
        _save_shard(shard, sp)
        log(json.dumps({"event": "load_tokens", "shard": k, "seqs": len(shard["tokens"]),
                        "sec": round(time.time() - t0, 1), "time": time.strftime("%H:%M:%S")}))


# ----------------------------------------------------------------------------------------------------- training view
def load_data(out: Path) -> list[tuple[torch.Tensor, int, torch.Tensor]]:
    """All shards -> list of (tokens int64 [T], prompt_len, feats bf16 [T, F])."""
    seqs = []
    for s in _shards(out):
        m = torch.load(s, weights_only=False)
        seqs += [(t.long(), p, f) for t, p, f in zip(m["tokens"], m["prompt_len"], m["feats"])]
    return seqs


def _training_seqs(out, max_seq: int, val_from: int = 0, val_every: int = 25) -> tuple[list, list]:
    """(train, held-out) lists of (tokens, prompt_len, features), capped at max_seq tokens, keeping sequences with
    >= 2 response tokens (an anchor needs a token after it). Held out: every `val_every`-th stored sequence from
    index `val_from` on (sequences before it may already have been trained on by an earlier run)."""
    train, val = [], []
    for i, (t, p, f) in enumerate(load_data(out)):
        if t[:max_seq].shape[0] - p >= 2:
            held = i >= val_from and i % val_every == val_every - 1
            (val if held else train).append((t[:max_seq], p, f[:max_seq]))
    return train, val
