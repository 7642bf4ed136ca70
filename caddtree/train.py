"""Training pipeline for the DFlash drafter: data generation, training loop, evaluation (τ of a linear block).

Data = the target's own greedy responses (chat template) to training prompts, stored tokenised in shards together with
the target features of every token (captured from the same `generate` call, so no second feature pass is needed).
Never the evaluation sets: GSM8K test, MATH-500, HumanEval, MBPP 11-510, MT-Bench, AlpacaEval are eval-only.

    caddtree train-drafter --stage data  --out runs/dflash   # appends shards, resumes where it stopped
    caddtree train-drafter --stage train --out runs/dflash   # resumes from runs/dflash/ckpt.pt if present
    caddtree eval-drafter --drafter drafters/smollm2-135m-instruct-dflash
"""
from __future__ import annotations

import glob
import json
import math
import os
import random
import time
from pathlib import Path

import numpy as np
import torch

from caddtree.datasets import load_prompts, read_records
from caddtree.errors import CaddtreeError


# ----------------------------------------------------------------------------------------------------- prompt data
def data_dir(arg: str | None = None) -> Path:
    if arg:
        d = Path(arg)
    elif os.environ.get("CADDTREE_DATA"):
        d = Path(os.environ["CADDTREE_DATA"])
    else:
        d = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
        if not d.is_dir():
            d = Path.cwd().parent / "shared" / "data"
    if not d.is_dir():
        raise CaddtreeError(f"data directory not found: {d} (pass --data-dir or set CADDTREE_DATA)")
    return d


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
def _atomic_save(obj, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def _shards(out: Path) -> list[Path]:
    return sorted(Path(p) for p in glob.glob(str(out / "data" / "shard_*.pt")))


def _write_meta(out: Path, meta: dict) -> None:
    """out/data/meta.json, after checking that shards already there come from the same target and layers."""
    (out / "data").mkdir(parents=True, exist_ok=True)
    path = out / "data" / "meta.json"
    if path.is_file():
        old = json.loads(path.read_text())
        if old["fingerprint"] != meta["fingerprint"] or old["target_layers"] != meta["target_layers"]:
            raise CaddtreeError(f"{out}/data was generated for another target/layers; use a fresh --out")
    path.write_text(json.dumps(meta, indent=1))


def generate_data(target, out: Path, ddir: Path, max_prompts: int = 100000, batch_size: int = 32,
                  max_prompt_tokens: int = 256, max_new_tokens: int = 256, max_minutes: float = 1e9, group: int = 4,
                  target_layers: list[int] | None = None, first_prompt: int = 0, log=print) -> None:
    """Greedy target responses + their target features, appended as shards `data/shard_XXXXX.pt`; resumes.

    Each shard: tokens (list of int32 [T]), prompt_len (list of int), feats (list of bf16 [T, m*H]; row t = target
    features of token t, the last row is zero: it is never used as context), sources, prompt indices.
    """
    from caddtree.dflash import default_target_layers
    layers = target_layers or default_target_layers(target.config.num_hidden_layers)
    _write_meta(out, {"target": target.name, "fingerprint": target.fingerprint, "target_layers": layers,
                      "max_prompt_tokens": max_prompt_tokens, "max_new_tokens": max_new_tokens})
    prompts = train_prompts(ddir)[:max_prompts]
    done = first_prompt  # > 0: an earlier run (whose shards are elsewhere) already covered the prompts before it
    for s in _shards(out):
        m = torch.load(s, weights_only=False)
        done = max(done, m["start"] + m["count"])
    t_start = time.time()
    window = batch_size * group  # one shard per window; inside it, batches are grouped by source and length
    while done < len(prompts) and (time.time() - t_start) / 60 < max_minutes:
        chunk = prompts[done:done + window]
        items = [(src, target.chat_ids(p).tolist()) for src, p in chunk]
        items = sorted((x for x in items if len(x[1]) <= max_prompt_tokens), key=lambda x: (x[0], len(x[1])))
        rec = {"tokens": [], "prompt_len": [], "feats": [], "source": [], "start": done, "count": len(chunk)}
        t0, n_new, n_steps = time.time(), 0, 0
        for i in range(0, len(items), batch_size):
            batch = items[i:i + batch_size]
            results, steps = greedy_batch(target, [x for _, x in batch], layers, max_new_tokens)
            n_steps += steps
            for (src, x), (resp, f) in zip(batch, results):
                n_new += len(resp)
                rec["tokens"].append(torch.tensor(x + resp, dtype=torch.int32))
                rec["prompt_len"].append(len(x))
                rec["feats"].append(f.to(torch.bfloat16))
                rec["source"].append(src)
        dt = time.time() - t0
        k = len(_shards(out))
        _atomic_save(rec, out / "data" / f"shard_{k:05d}.pt")
        done += len(chunk)
        log(json.dumps({"event": "data", "shard": k, "prompts_done": done, "seqs": len(items), "new_tokens": n_new,
                        "gen_steps": n_steps, "sec": round(dt, 1), "tok_s": round(n_new / dt, 1),
                        "time": time.strftime("%H:%M:%S")}))


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
        rec = {"tokens": [], "prompt_len": [], "feats": [], "source": [], "start": int(z["shard_start"][k]),
               "count": int(z["shard_count"][k])}
        for i in np.flatnonzero(z["shard"] == k):
            with torch.inference_mode():
                _, f = target.forward(seqs[i].long().to(target.device), target.new_cache())
                f[-1] = 0  # as generated: the last token's features are never context
            rec["tokens"].append(seqs[i]), rec["prompt_len"].append(int(z["prompt_len"][i]))
            rec["feats"].append(f.to(torch.bfloat16).cpu()), rec["source"].append(str(z["source"][i]))
        _atomic_save(rec, sp)
        log(json.dumps({"event": "load_tokens", "shard": k, "seqs": len(rec["tokens"]),
                        "sec": round(time.time() - t0, 1), "time": time.strftime("%H:%M:%S")}))


def load_data(out: Path) -> list[tuple[torch.Tensor, int, torch.Tensor]]:
    """All shards -> list of (tokens int64 [T], prompt_len, feats bf16 [T, F])."""
    seqs = []
    for s in _shards(out):
        m = torch.load(s, weights_only=False)
        seqs += [(t.long(), p, f) for t, p, f in zip(m["tokens"], m["prompt_len"], m["feats"])]
    return seqs


# ----------------------------------------------------------------------------------------------------- CLI
def _log_to(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)

    def log(line: str) -> None:
        print(line, flush=True)
        with open(path, "a") as f:
            f.write(line + "\n")
    return log


def add_train_parser(subparsers) -> None:
    p = subparsers.add_parser("train-drafter", help="generate training data and/or train a DFlash drafter")
    p.add_argument("--target", default=None, help="target model (default: the built-in SmolLM2-135M-Instruct)")
    p.add_argument("--stage", choices=["data", "train", "all", "save-tokens", "load-tokens"], default="all",
                   help="save-tokens / load-tokens: write the data's token ids to --tokens / rebuild the data from it")
    p.add_argument("--tokens", default=None, metavar="FILE", help="token archive of save-tokens / load-tokens")
    p.add_argument("--out", default="runs/dflash", help="work dir: data shards, checkpoints, logs")
    p.add_argument("--data-dir", default=None, help="prompt data (default: $CADDTREE_DATA or ../shared/data)")
    p.add_argument("--max-minutes", type=float, default=60.0, help="wall-clock budget of each stage")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (1 when the cores are shared)")
    # data
    p.add_argument("--max-prompts", type=int, default=100000)
    p.add_argument("--first-prompt", type=int, default=0,
                   help="data: start at this index of the shuffled training prompts (skip what an earlier run used)")
    p.add_argument("--gen-batch", type=int, default=32)
    p.add_argument("--max-prompt-tokens", type=int, default=256)
    p.add_argument("--max-new-tokens", type=int, default=256)
    # model
    p.add_argument("--block-size", type=int, default=8)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--num-target-layers", type=int, default=3, help="m: target layers read as context")
    p.add_argument("--init-from", default=None, metavar="DIR",
                   help="train: start from this exported drafter (its config and weights) instead of a new one; "
                        "a checkpoint in --out takes precedence (resume)")
    p.add_argument("--init", choices=["random", "target"], default="random",
                   help="draft layers from scratch (DFlash) or copied from the target's last layers")
    p.add_argument("--draft-vocab", type=int, default=8192,
                   help="K most frequent response tokens the drafter predicts (0 = the full target vocabulary)")
    # optimisation
    p.add_argument("--steps", type=int, default=100000,
                   help="max optimizer steps; the cosine follows steps or --max-minutes, whichever ends first")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=40, help="warm-up steps")
    p.add_argument("--anchors", type=int, default=64, help="blocks per sequence per step")
    p.add_argument("--seqs-per-step", type=int, default=4)
    p.add_argument("--max-seq", type=int, default=512, help="sequence cap (tokens) in training")
    p.add_argument("--gamma", type=float, default=None, help="loss decay (default 4 for B=8, 7 for B=16)")
    p.add_argument("--ckpt-minutes", type=float, default=5.0)
    p.add_argument("--restart-schedule", type=int, default=0, metavar="PHASE",
                   help="on resume, start training phase PHASE (1, 2, ...): a new warm-up + cosine of --max-minutes, "
                        "e.g. after adding data; rerunning the same command resumes that phase, it does not restart")
    p.add_argument("--export", default=None, help="after training, export the drafter to this directory")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_train)


def add_eval_parser(subparsers) -> None:
    p = subparsers.add_parser("eval-drafter", help="acceptance length τ of a drafter's linear block")
    p.add_argument("--drafter", required=True, help="exported drafter dir, or a training checkpoint (.pt)")
    p.add_argument("--target", default=None)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--datasets", default="gsm8k,math500,humaneval,mbpp,mt_bench,alpaca",
                   help="evaluation sets (caddtree.datasets names; the same prompts and formats as `caddtree bench`)")
    p.add_argument("--n", type=int, default=20, help="prompts per dataset")
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--budgets", default="8,16,32", help="also τ of the best-first tree at these node budgets")
    p.add_argument("--json", default=None, help="append the result as one JSON line to this file")
    p.set_defaults(func=cmd_eval)


# ----------------------------------------------------------------------------------------------------- training
def _lr(step: int, progress: float, peak: float, warmup_steps: int) -> float:
    """Linear warm-up over `warmup_steps`, then cosine down to 10% of the peak as `progress` goes 0 -> 1."""
    if step <= warmup_steps:
        return peak * step / max(1, warmup_steps)
    t = min(1.0, max(0.0, progress))
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


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


@torch.no_grad()
def _validate(model, seqs, anchors: int, gamma: float, seed: int = 0) -> dict:
    """Loss and per-position accuracy on held-out sequences (fixed anchors, so checkpoints compare)."""
    from caddtree.dflash import dflash_loss
    if not seqs:
        return {}
    g = torch.Generator().manual_seed(seed)
    loss, correct, valid = 0.0, 0, 0
    for toks, p, feats in seqs:
        cand = torch.arange(p - 1, toks.shape[0] - 1)
        a = cand[torch.randperm(len(cand), generator=g)[:anchors]].sort().values
        l, c, v = dflash_loss(model.train_forward(toks, feats, a), toks, a, gamma, model.label_index)
        loss, correct, valid = loss + l.item(), correct + c.float(), valid + v.float()
    return {"val_loss": round(loss / len(seqs), 4), "val_seqs": len(seqs),
            "val_acc": [round(x, 3) for x in (correct / valid.clamp(min=1)).tolist()]}


def train_drafter(target, out, args, log=print):
    """Train (or resume) a DFlash drafter on the shards in `out/data`; checkpoints to `out/ckpt.pt` atomically and
    snapshots the drafter to `out/snapshots/step_N/` at each checkpoint (for the τ-vs-tokens curve)."""
    from caddtree.dflash import DFlashConfig, DFlashModel, dflash_loss, save_drafter
    out = Path(out)
    t_begin = time.time()
    ckpt_path = out / "ckpt.pt"
    ck = torch.load(ckpt_path, weights_only=False) if ckpt_path.is_file() else None
    if ck:
        c = DFlashConfig(**ck["config"])
        model = DFlashModel(c)
        model.load_state_dict(ck["model"])
        model.bind(target)
    st = {"step": 0, "epoch": 0, "ptr": 0, "blocks": 0, "query_tokens": 0, "train_sec": 0.0, "val_from": 0}
    if ck:  # a run from before the held-out split trained on everything it had: hold out only newer sequences
        st.update({"val_from": None, **ck["state"]})
        if st["val_from"] is None:
            st["val_from"] = sum(len(torch.load(x, weights_only=False)["tokens"]) for x in _shards(out)[:st["shards"]])
    seqs, val = _training_seqs(out, args.max_seq, st["val_from"])
    if not seqs:
        raise CaddtreeError(f"no training data in {out}/data: run `caddtree train-drafter --stage data --out {out}`")
    continued = not ck and bool(getattr(args, "init_from", None))  # an exported drafter, continued on new data
    if continued:
        from caddtree.dflash import load_model
        model = load_model(args.init_from, target)
        c = model.c
        log(json.dumps({"event": "init_from", "path": str(args.init_from)}))
    elif not ck:
        K = getattr(args, "draft_vocab", 0)
        c = DFlashConfig.for_target(target, num_layers=args.layers, block_size=args.block_size,
                                    m=args.num_target_layers, draft_vocab_size=K)
        torch.manual_seed(args.seed)
        model = DFlashModel(c).bind(target)
        if K:  # the K most frequent response tokens, then prompt tokens, then low BPE ids (frequent merges)
            resp, prompt = torch.zeros(c.vocab_size), torch.zeros(c.vocab_size)
            for t, p, _ in seqs:
                resp += torch.bincount(t[p:], minlength=c.vocab_size)[:c.vocab_size].float()
                prompt += torch.bincount(t[:p], minlength=c.vocab_size)[:c.vocab_size].float()
            score = resp * 1e6 + prompt.clamp(max=999) * 1e3 - torch.arange(c.vocab_size) / c.vocab_size
            score[sorted(target.eos_ids)] = float("inf")
            keep = score.topk(K).indices.sort().values
            cover = float(resp[keep].sum() / resp.sum())
            log(json.dumps({"event": "draft_vocab", "K": K, "response_token_coverage": round(cover, 4),
                            "distinct_response_tokens": int((resp > 0).sum())}))
            model.set_vocab(keep, target)
        if getattr(args, "init", "random") == "target":
            model.init_from_target(target)
        else:  # DFlash: draft layers from scratch; the mask embedding starts at the mean token embedding
            with torch.no_grad():
                model.mask_embedding.copy_(model._shared["embed"].mean(0))
    B = c.block_size
    gamma = args.gamma or (7.0 if B >= 16 else 4.0 if B <= 8 else 5.0)
    if seqs[0][2].shape[1] != model.fc.in_features:
        raise CaddtreeError(f"features in {out}/data have width {seqs[0][2].shape[1]}, the drafter expects "
                            f"{model.fc.in_features}: regenerate the data for target layers {c.target_layers}")
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.01)
    if ck:
        opt.load_state_dict(ck["opt"])
    phase = getattr(args, "restart_schedule", 0) or 0
    if ck and phase > st.get("phase", 0):  # warm restart: a new warm-up + cosine from here (once per phase number)
        st.update(phase=phase, phase_step=st["step"], phase_sec=st["train_sec"], horizon_sec=args.max_minutes * 60)
    if continued and val:  # the continued drafter's start on this held-out set
        model.eval()
        log(json.dumps({"event": "init_val", **_validate(model, val[:40], args.anchors, gamma)}))
        model.train()
    n_resp = sum(t.shape[0] - p for t, p, _ in seqs)
    log(json.dumps({"event": "start", "resume_step": st["step"], "seqs": len(seqs), "held_out": len(val),
                    "response_tokens": n_resp,
                    "total_tokens": sum(t.shape[0] for t, _, _ in seqs), "config": asdict_cfg(c), "gamma": gamma,
                    "params": sum(p.numel() for p in model.parameters()), "time": time.strftime("%H:%M:%S")}))

    def order(epoch):
        g = torch.Generator().manual_seed(args.seed * 1000 + epoch)
        return torch.randperm(len(seqs), generator=g).tolist()

    perm = order(st["epoch"])
    st.setdefault("shards", len(_shards(out)))
    st.setdefault("horizon_sec", args.max_minutes * 60)  # the cosine's wall-clock length (kept on resume)
    gen = torch.Generator().manual_seed(args.seed * 7919 + st["step"])
    model.train()
    last_ckpt = time.time()
    log_every = getattr(args, "log_every", 10)
    agg = {"loss": 0.0, "n": 0, "correct": torch.zeros(B - 1), "valid": torch.zeros(B - 1), "t": time.time(),
           "blocks": 0, "q": 0}

    def checkpoint():
        nonlocal seqs, val, perm
        st["train_sec"] += time.time() - agg.get("t_ck", t_begin)
        agg["t_ck"] = time.time()
        _atomic_save({"config": asdict_cfg(c), "model": model.state_dict(), "opt": opt.state_dict(), "state": st},
                     ckpt_path)
        save_drafter(model, out / "snapshots" / f"step_{st['step']:06d}")
        n_shards = len(_shards(out))
        if n_shards != st.get("shards", n_shards):  # data generation still running alongside: take the new shards
            seqs, val = _training_seqs(out, args.max_seq, st["val_from"])
            perm = order(st["epoch"])
        st["shards"] = n_shards
        model.eval()
        metrics = _validate(model, val[:40], args.anchors, gamma)
        model.train()
        log(json.dumps({"event": "ckpt", "step": st["step"], "seqs": len(seqs), "shards": n_shards, **metrics,
                        "train_sec": round(st["train_sec"]), "time": time.strftime("%H:%M:%S")}))

    while st["step"] < args.steps and (time.time() - t_begin) / 60 < args.max_minutes:
        st["step"] += 1
        # schedule progress: steps or wall-clock, whichever is further (a fixed CPU budget ends on a low lr)
        phase_step = st["step"] - st.get("phase_step", 0)
        phase_sec = st["train_sec"] - st.get("phase_sec", 0.0) + time.time() - agg.get("t_ck", t_begin)
        progress = max(phase_step / args.steps, phase_sec / st["horizon_sec"])
        for grp in opt.param_groups:
            grp["lr"] = _lr(phase_step, progress, args.lr, args.warmup)
        opt.zero_grad(set_to_none=True)
        for _ in range(args.seqs_per_step):
            if st["ptr"] >= len(perm):
                st["epoch"], st["ptr"] = st["epoch"] + 1, 0
                perm = order(st["epoch"])
            toks, p, feats = seqs[perm[st["ptr"] % len(seqs)]]
            st["ptr"] += 1
            cand = torch.arange(p - 1, toks.shape[0] - 1)  # roots: last prompt token .. second-to-last token
            anchors = cand[torch.randperm(len(cand), generator=gen)[:args.anchors]].sort().values
            logits = model.train_forward(toks, feats, anchors)  # [A, B-1, V]
            loss, correct, valid = dflash_loss(logits, toks, anchors, gamma, model.label_index)
            (loss / args.seqs_per_step).backward()
            agg["loss"] += loss.item()
            agg["n"] += 1
            agg["correct"] += correct.float()
            agg["valid"] += valid.float()
            agg["blocks"] += len(anchors)
            agg["q"] += len(anchors) * B
            st["blocks"] += len(anchors)
            st["query_tokens"] += len(anchors) * B
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if st["step"] % log_every == 0 or st["step"] == args.steps:
            dt = time.time() - agg["t"]
            log(json.dumps({"event": "train", "step": st["step"], "epoch": st["epoch"],
                            "loss": round(agg["loss"] / agg["n"], 4),
                            "acc": [round(x, 3) for x in (agg["correct"] / agg["valid"].clamp(min=1)).tolist()],
                            "lr": round(opt.param_groups[0]["lr"], 7), "grad_norm": round(float(gn), 3),
                            "blocks_s": round(agg["blocks"] / dt, 1), "query_tok_s": round(agg["q"] / dt, 1),
                            "blocks_total": st["blocks"], "time": time.strftime("%H:%M:%S")}))
            agg.update(loss=0.0, n=0, correct=torch.zeros(B - 1), valid=torch.zeros(B - 1), t=time.time(),
                       blocks=0, q=0)
        if (time.time() - last_ckpt) / 60 >= args.ckpt_minutes:
            checkpoint()
            last_ckpt = time.time()
    checkpoint()
    if getattr(args, "export", None):
        save_drafter(model, args.export)
        log(json.dumps({"event": "export", "path": str(args.export), "step": st["step"]}))
    return model


def asdict_cfg(c) -> dict:
    from dataclasses import asdict
    return asdict(c)


# ----------------------------------------------------------------------------------------------------- evaluation
def greedy_batch(target, prompts: list[list[int]], layers: list[int], max_new_tokens: int):
    """The target's greedy responses to a batch of prompts (token ids), left-padded into one HF `generate` call, and
    the target features of every prompt and response token.

    Returns ([(response ids incl. the EOS token if reached, feats fp32 [T, m*H])], generation steps); row t of feats
    holds the features of token t of prompt + response; the last row is zero (it is never used as context).
    """
    eos = sorted(target.eos_ids)
    tok = target.tokenizer
    pad = next(p for p in (getattr(tok, "pad_token_id", None), target.config.pad_token_id, *eos, 0) if p is not None)
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


def evaluate(drafter, refs, budget: int | None = None) -> dict:
    """Acceptance length τ (bonus counted) against the target's greedy continuation `refs`.

    budget None: a linear block (the drafter's argmax per position); budget n: the best-first tree of n nodes
    (caddtree.tree.build_tree), accepted along the greedy path. Each round emits the accepted prefix + 1 bonus token.
    Also per-position acceptance rates (P(depth k accepted | depth k-1 accepted)) and the drafter's cost per round."""
    from caddtree.accept import accept_walk
    from caddtree.engine import _now
    from caddtree.tree import build_tree
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
            t0 = _now(dev)  # synchronises on CUDA: time the drafter's work, not its launch
            lp = drafter.propose(toks[:c + 1], feats[prev:c])
            times.append(_now(dev) - t0)
            prev = c
            remaining = T - 1 - c
            truth = toks[c + 1:c + 1 + min(L, remaining)].tolist()
            a = 0
            if budget is None:
                draft = lp.argmax(-1).tolist()
                while a < len(truth) and draft[a] == truth[a]:
                    a += 1
            else:
                tree = build_tree(lp, budget)
                # the target's greedy choice at a node of depth d is truth[d] (-1: past the reference's end)
                choices = [truth[d] if d < len(truth) else -1 for d in [0] + tree.depths.tolist()]
                a = len(accept_walk(tree.tokens, tree.parents, torch.tensor(choices))[0])
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
    from caddtree.dflash import DFlashConfig, DFlashDrafter, DFlashModel, check_target, load_drafter
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
    from caddtree.target import cache_dir
    root = cache_dir() / "eval_refs"
    key = lambda k: root / f"{target.fingerprint}_bench-{name}_{k}_{max_new_tokens}_{'-'.join(map(str, layers))}.pt"  # noqa
    if key(n).is_file():
        return torch.load(key(n), weights_only=False)
    have = next((k for k in range(n - 1, 0, -1) if key(k).is_file()), 0)
    refs = torch.load(key(have), weights_only=False) if have else []
    prompts = [x["prompt"] for x in load_prompts(name, n, data_dir=ddir)]  # the bench's prompts and formats
    refs += greedy_references(target, prompts[have:], layers, max_new_tokens)
    root.mkdir(parents=True, exist_ok=True)
    _atomic_save(refs, key(n))
    return refs


def cmd_eval(args) -> dict:
    from caddtree.cli import check_out_path
    check_out_path(args.json, "--json", directory=False)
    for flag, value in (("--n", args.n), ("--max-new-tokens", args.max_new_tokens), ("--threads", args.threads)):
        if value < 1:
            raise CaddtreeError(f"{flag} must be >= 1, got {value}")
    parts = [b.strip() for b in args.budgets.split(",") if b.strip()]
    if not all(b.isdigit() and int(b) >= 1 for b in parts):
        raise CaddtreeError(f"--budgets must be node counts >= 1 separated by commas (e.g. 8,16,32), got "
                            f"'{args.budgets}'")
    budgets = [int(b) for b in parts]
    torch.set_num_threads(args.threads)
    target = _load_target(args.target)
    drafter = _drafter_from(args.drafter, target)
    ddir = data_dir(args.data_dir)
    res = {"drafter": str(args.drafter), "n": args.n, "max_new_tokens": args.max_new_tokens}
    for name in args.datasets.split(","):
        refs = eval_references(target, ddir, name, args.n, args.max_new_tokens, drafter.target_layers)
        res[name] = evaluate(drafter, refs)
        for n in budgets:
            res[name][f"tau_tree{n}"] = evaluate(drafter, refs, budget=n)["tau"]
        print(json.dumps({name: res[name]}), flush=True)
    taus = [res[n]["tau"] for n in args.datasets.split(",")]
    res["tau_mean"] = round(sum(taus) / len(taus), 3)
    print(json.dumps({"tau_mean": res["tau_mean"]}), flush=True)
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(res) + "\n")
    return res


def _load_target(spec):
    from caddtree.target import DEFAULT_TARGET, load_target
    return load_target(spec or DEFAULT_TARGET)


def check_train_args(args) -> None:
    """Option values a run would only trip over after loading the target and generating data: one line each."""
    at_least = {"--steps": (args.steps, 1), "--block-size": (args.block_size, 2), "--layers": (args.layers, 1),
                "--num-target-layers": (args.num_target_layers, 1), "--anchors": (args.anchors, 1),
                "--seqs-per-step": (args.seqs_per_step, 1), "--max-seq": (args.max_seq, 2),
                "--warmup": (args.warmup, 0), "--gen-batch": (args.gen_batch, 1),
                "--max-prompts": (args.max_prompts, 1),
                "--max-prompt-tokens": (args.max_prompt_tokens, 1), "--max-new-tokens": (args.max_new_tokens, 1),
                "--first-prompt": (args.first_prompt, 0), "--draft-vocab": (args.draft_vocab, 0),
                "--threads": (args.threads, 1), "--restart-schedule": (args.restart_schedule, 0)}
    for flag, (value, low) in at_least.items():
        if value < low:
            raise CaddtreeError(f"{flag} must be >= {low}, got {value}")
    for flag, value in (("--lr", args.lr), ("--max-minutes", args.max_minutes), ("--ckpt-minutes", args.ckpt_minutes),
                        ("--gamma", args.gamma)):
        if value is not None and not value > 0:
            raise CaddtreeError(f"{flag} must be > 0, got {value}")


def cmd_train(args) -> None:
    from caddtree.cli import check_out_path
    check_train_args(args)
    check_out_path(args.out, "--out", directory=True)
    check_out_path(args.export, "--export", directory=True)
    check_out_path(args.tokens, "--tokens", directory=False)
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    log = _log_to(out / "log.jsonl")
    if args.stage in ("save-tokens", "load-tokens") and not args.tokens:
        raise CaddtreeError(f"--stage {args.stage} needs --tokens FILE")
    if args.stage == "save-tokens":  # no target needed
        log(json.dumps({"event": "save_tokens", "path": args.tokens, "seqs": save_tokens(out, Path(args.tokens))}))
        return
    target = _load_target(args.target)
    from caddtree.dflash import default_target_layers
    layers = default_target_layers(target.config.num_hidden_layers, args.num_target_layers)
    if args.stage == "load-tokens":
        load_tokens(target, Path(args.tokens), out, log=log)
    if args.stage in ("data", "all"):
        generate_data(target, out, data_dir(args.data_dir), max_prompts=args.max_prompts, batch_size=args.gen_batch,
                      max_prompt_tokens=args.max_prompt_tokens, max_new_tokens=args.max_new_tokens,
                      max_minutes=args.max_minutes, target_layers=layers, first_prompt=args.first_prompt, log=log)
    if args.stage in ("train", "all"):
        train_drafter(target, out, args, log=log)


def main(argv=None) -> None:
    import argparse
    ap = argparse.ArgumentParser(prog="python -m caddtree.train")
    sub = ap.add_subparsers(dest="cmd", required=True)
    add_train_parser(sub)
    add_eval_parser(sub)
    args = ap.parse_args(argv)
    try:
        args.func(args)
    except CaddtreeError as e:
        raise SystemExit(f"error: {e}")


if __name__ == "__main__":
    main()
