"""The drafter's training loop: resumable, checkpointed, with a held-out split that stays fixed across resumes.

One step: `seqs_per_step` sequences; per sequence, `anchors` roots drawn from (last prompt token .. second-to-last
token); each root's block of B-1 positions is drafted from the target features before it, and position k (1..B-1)
is trained to predict the token k after the root with weight exp(-(k-1)/γ) (`dflash.dflash_loss`). Gradients are
clipped to norm 1; AdamW (β = 0.9, 0.95; weight decay 0.01).

Learning rate: linear warm-up over `warmup` steps, then a cosine from the peak down to 10% of it,
    lr(t) = peak · (0.1 + 0.45 · (1 + cos πt)),   t = max(step / steps, seconds / horizon_sec),
so a run bounded by wall-clock time still ends on a low rate. A warm restart (`restart_schedule` = N > the phase in
the checkpoint) begins a new warm-up + cosine from the current step, once per phase number.

Invariants: `out/ckpt.pt` (config, weights, optimizer, state) is written atomically, so a run killed at any moment
resumes from its last checkpoint with the same data order (per-epoch permutations seeded by seed and epoch). Held out:
every 25th stored sequence from `val_from` on, where `val_from` is fixed when training first starts, so sequences an
earlier run trained on are never scored as held out.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import torch

from caddtree.dflash import DFlashConfig, DFlashModel, dflash_loss, load_model, save_drafter
from caddtree.errors import CaddtreeError
from caddtree.files import atomic_write
from caddtree.train.config import TrainConfig
from caddtree.train.data import _shards, _training_seqs

VAL_SEQS = 40  # held-out sequences scored at each checkpoint


def _lr(step: int, progress: float, peak: float, warmup_steps: int) -> float:
    """Linear warm-up over `warmup_steps`, then cosine down to 10% of the peak as `progress` goes 0 -> 1."""
    if step <= warmup_steps:
        return peak * step / max(1, warmup_steps)
    t = min(1.0, max(0.0, progress))
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def _default_gamma(block_size: int) -> float:
    return 7.0 if block_size >= 16 else 4.0 if block_size <= 8 else 5.0


def _sample_anchors(prompt_len: int, length: int, n: int, gen: torch.Generator) -> torch.Tensor:
    """Up to n distinct roots, sorted: last prompt token .. second-to-last token (a root needs a token after it)."""
    cand = torch.arange(prompt_len - 1, length - 1)
    return cand[torch.randperm(len(cand), generator=gen)[:n]].sort().values


def _epoch_order(seed: int, epoch: int, n: int) -> list[int]:
    g = torch.Generator().manual_seed(seed * 1000 + epoch)
    return torch.randperm(n, generator=g).tolist()


@torch.no_grad()
def _validate(model, seqs, anchors: int, gamma: float, seed: int = 0) -> dict:
    """Loss and per-position accuracy on held-out sequences (fixed anchors, so checkpoints compare)."""
    if not seqs:
        return {}
    g = torch.Generator().manual_seed(seed)
    loss, correct, valid = 0.0, 0, 0
    for toks, p, feats in seqs:
        a = _sample_anchors(p, toks.shape[0], anchors, g)
        l, c, v = dflash_loss(model.train_forward(toks, feats, a), toks, a, gamma, model.label_index)
        loss, correct, valid = loss + l.item(), correct + c.float(), valid + v.float()
    return {"val_loss": round(loss / len(seqs), 4), "val_seqs": len(seqs),
            "val_acc": [round(x, 3) for x in (correct / valid.clamp(min=1)).tolist()]}


def asdict_cfg(c) -> dict:
    return asdict(c)


# ----------------------------------------------------------------------------------------------------- the model
def _draft_vocab(target, c: DFlashConfig, seqs, K: int, log) -> torch.Tensor:
    """The K most frequent response tokens, then prompt tokens, then low BPE ids (frequent merges); EOS always."""
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
    return keep


def _new_model(target, cfg: TrainConfig, seqs, log) -> DFlashModel:
    c = DFlashConfig.for_target(target, num_layers=cfg.layers, block_size=cfg.block_size,
                                m=cfg.num_target_layers, draft_vocab_size=cfg.draft_vocab)
    torch.manual_seed(cfg.seed)
    model = DFlashModel(c).bind(target)
    if cfg.draft_vocab:
        model.set_vocab(_draft_vocab(target, c, seqs, cfg.draft_vocab, log), target)
    if cfg.init == "target":
        model.init_from_target(target)
    else:  # DFlash: draft layers from scratch; the mask embedding starts at the mean token embedding
        with torch.no_grad():
            model.mask_embedding.copy_(model._shared["embed"].mean(0))
    return model


def _model_for(target, cfg: TrainConfig, ck: dict | None, seqs, log) -> DFlashModel:
    """The checkpoint's model (resume), else the exported drafter `init_from` (continued on new data), else new."""
    if ck:
        model = DFlashModel(DFlashConfig(**ck["config"]))
        model.load_state_dict(ck["model"])
        return model.bind(target)
    if cfg.init_from:
        model = load_model(cfg.init_from, target)
        log(json.dumps({"event": "init_from", "path": str(cfg.init_from)}))
        return model
    return _new_model(target, cfg, seqs, log)


# ----------------------------------------------------------------------------------------------------- the run
@dataclass
class Run:
    """A training run's live objects. `state` is what ckpt.pt keeps besides config, weights and optimizer: step,
    epoch, ptr (position in the epoch's permutation), blocks, query_tokens, train_sec, val_from, shards, horizon_sec
    (the cosine's wall-clock length) and, after a warm restart, phase, phase_step, phase_sec."""
    out: Path
    cfg: TrainConfig
    log: Callable[[str], None]
    model: DFlashModel
    opt: torch.optim.Optimizer
    state: dict
    seqs: list
    val: list
    gamma: float
    t_ckpt: float  # when state["train_sec"] was last brought up to date
    perm: list[int] = field(default_factory=list)
    gen: torch.Generator | None = None
    window: dict = field(default_factory=dict)  # sums since the last "train" log line


def _new_window(block_size: int) -> dict:
    return {"loss": 0.0, "n": 0, "correct": torch.zeros(block_size - 1), "valid": torch.zeros(block_size - 1),
            "t": time.time(), "blocks": 0, "q": 0}


def _resume_state(out: Path, ck: dict | None) -> dict:
    st = {"step": 0, "epoch": 0, "ptr": 0, "blocks": 0, "query_tokens": 0, "train_sec": 0.0, "val_from": 0}
    if ck:  # a run from before the held-out split trained on everything it had: hold out only newer sequences
        st.update({"val_from": None, **ck["state"]})
        if st["val_from"] is None:
            st["val_from"] = sum(len(torch.load(x, weights_only=False)["tokens"]) for x in _shards(out)[:st["shards"]])
    return st


def _held_out_metrics(run: Run) -> dict:
    run.model.eval()
    metrics = _validate(run.model, run.val[:VAL_SEQS], run.cfg.anchors, run.gamma)
    run.model.train()
    return metrics


def _log_start(run: Run) -> None:
    seqs, model = run.seqs, run.model
    run.log(json.dumps({"event": "start", "resume_step": run.state["step"], "seqs": len(seqs),
                        "held_out": len(run.val), "response_tokens": sum(t.shape[0] - p for t, p, _ in seqs),
                        "total_tokens": sum(t.shape[0] for t, _, _ in seqs), "config": asdict_cfg(model.c),
                        "gamma": run.gamma, "params": sum(p.numel() for p in model.parameters()),
                        "time": time.strftime("%H:%M:%S")}))


def _start_run(target, out: Path, cfg: TrainConfig, log, t_begin: float) -> Run:
    """Resume from out/ckpt.pt, or start from `init_from` or from scratch, on the shards in out/data."""
    ck = torch.load(out / "ckpt.pt", weights_only=False) if (out / "ckpt.pt").is_file() else None
    st = _resume_state(out, ck)
    seqs, val = _training_seqs(out, cfg.max_seq, st["val_from"])
    if not seqs:
        raise CaddtreeError(f"no training data in {out}/data: run `caddtree train-drafter --stage data --out {out}`")
    model = _model_for(target, cfg, ck, seqs, log)
    if seqs[0][2].shape[1] != model.fc.in_features:
        raise CaddtreeError(f"features in {out}/data have width {seqs[0][2].shape[1]}, the drafter expects "
                            f"{model.fc.in_features}: regenerate the data for target layers {model.c.target_layers}")
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.01)
    if ck:
        opt.load_state_dict(ck["opt"])
    if ck and (cfg.restart_schedule or 0) > st.get("phase", 0):  # warm restart: a new warm-up + cosine from here
        st.update(phase=cfg.restart_schedule, phase_step=st["step"], phase_sec=st["train_sec"],
                  horizon_sec=cfg.max_minutes * 60)
    run = Run(out, cfg, log, model, opt, st, seqs, val, cfg.gamma or _default_gamma(model.c.block_size), t_begin)
    if not ck and cfg.init_from and val:  # the continued drafter's start on this held-out set
        log(json.dumps({"event": "init_val", **_held_out_metrics(run)}))
    _log_start(run)
    st.setdefault("shards", len(_shards(out)))
    st.setdefault("horizon_sec", cfg.max_minutes * 60)  # the cosine's wall-clock length (kept on resume)
    run.perm = _epoch_order(cfg.seed, st["epoch"], len(seqs))
    run.gen = torch.Generator().manual_seed(cfg.seed * 7919 + st["step"])
    model.train()
    run.window = _new_window(model.c.block_size)
    return run


# ----------------------------------------------------------------------------------------------------- one step
def _next_seq(run: Run):
    st = run.state
    if st["ptr"] >= len(run.perm):
        st["epoch"], st["ptr"] = st["epoch"] + 1, 0
        run.perm = _epoch_order(run.cfg.seed, st["epoch"], len(run.seqs))
    seq = run.seqs[run.perm[st["ptr"] % len(run.seqs)]]
    st["ptr"] += 1
    return seq


def _accumulate(run: Run, toks: torch.Tensor, p: int, feats: torch.Tensor) -> None:
    """Loss of one sequence's blocks, backpropagated with weight 1 / seqs_per_step, and counted in the window."""
    B = run.model.c.block_size
    anchors = _sample_anchors(p, toks.shape[0], run.cfg.anchors, run.gen)
    logits = run.model.train_forward(toks, feats, anchors)  # [A, B-1, V]
    loss, correct, valid = dflash_loss(logits, toks, anchors, run.gamma, run.model.label_index)
    (loss / run.cfg.seqs_per_step).backward()
    w, st = run.window, run.state
    w["loss"] += loss.item()
    w["n"] += 1
    w["correct"] += correct.float()
    w["valid"] += valid.float()
    w["blocks"] += len(anchors)
    w["q"] += len(anchors) * B
    st["blocks"] += len(anchors)
    st["query_tokens"] += len(anchors) * B


def _train_step(run: Run) -> torch.Tensor:
    """One optimizer step; returns the gradient norm before clipping."""
    st, cfg = run.state, run.cfg
    st["step"] += 1
    # schedule progress: steps or wall-clock, whichever is further (a fixed CPU budget ends on a low lr)
    phase_step = st["step"] - st.get("phase_step", 0)
    phase_sec = st["train_sec"] - st.get("phase_sec", 0.0) + time.time() - run.t_ckpt
    progress = max(phase_step / cfg.steps, phase_sec / st["horizon_sec"])
    for grp in run.opt.param_groups:
        grp["lr"] = _lr(phase_step, progress, cfg.lr, cfg.warmup)
    run.opt.zero_grad(set_to_none=True)
    for _ in range(cfg.seqs_per_step):
        _accumulate(run, *_next_seq(run))
    gn = torch.nn.utils.clip_grad_norm_(run.model.parameters(), 1.0)
    run.opt.step()
    return gn


def _log_window(run: Run, grad_norm) -> None:
    st, w = run.state, run.window
    dt = time.time() - w["t"]
    run.log(json.dumps({"event": "train", "step": st["step"], "epoch": st["epoch"],
                        "loss": round(w["loss"] / w["n"], 4),
                        "acc": [round(x, 3) for x in (w["correct"] / w["valid"].clamp(min=1)).tolist()],
                        "lr": round(run.opt.param_groups[0]["lr"], 7), "grad_norm": round(float(grad_norm), 3),
                        "blocks_s": round(w["blocks"] / dt, 1), "query_tok_s": round(w["q"] / dt, 1),
                        "blocks_total": st["blocks"], "time": time.strftime("%H:%M:%S")}))
    run.window = _new_window(run.model.c.block_size)


# ----------------------------------------------------------------------------------------------------- checkpoints
def _checkpoint(run: Run) -> None:
    """out/ckpt.pt (atomic) and a drafter snapshot out/snapshots/step_N (for the τ-vs-tokens curve); takes in the
    shards a data stage running alongside has added; logs the held-out metrics."""
    st = run.state
    st["train_sec"] += time.time() - run.t_ckpt
    run.t_ckpt = time.time()
    ck = {"config": asdict_cfg(run.model.c), "model": run.model.state_dict(), "opt": run.opt.state_dict(), "state": st}
    atomic_write(run.out / "ckpt.pt", lambda tmp: torch.save(ck, tmp))
    save_drafter(run.model, run.out / "snapshots" / f"step_{st['step']:06d}")
    n_shards = len(_shards(run.out))
    if n_shards != st.get("shards", n_shards):  # data generation still running alongside: take the new shards
        run.seqs, run.val = _training_seqs(run.out, run.cfg.max_seq, st["val_from"])
        run.perm = _epoch_order(run.cfg.seed, st["epoch"], len(run.seqs))
    st["shards"] = n_shards
    metrics = _held_out_metrics(run)
    run.log(json.dumps({"event": "ckpt", "step": st["step"], "seqs": len(run.seqs), "shards": n_shards, **metrics,
                        "train_sec": round(st["train_sec"]), "time": time.strftime("%H:%M:%S")}))


def train_drafter(target, out, cfg: TrainConfig, log=print):
    """Train (or resume) a DFlash drafter on the shards in `out/data`; checkpoints to `out/ckpt.pt` atomically and
    snapshots the drafter to `out/snapshots/step_N/` at each checkpoint (for the τ-vs-tokens curve)."""
    t_begin = time.time()
    run = _start_run(target, Path(out), cfg, log, t_begin)
    last_ckpt = time.time()
    while run.state["step"] < cfg.steps and (time.time() - t_begin) / 60 < cfg.max_minutes:
        grad_norm = _train_step(run)
        if run.state["step"] % cfg.log_every == 0 or run.state["step"] == cfg.steps:
            _log_window(run, grad_norm)
        if (time.time() - last_ckpt) / 60 >= cfg.ckpt_minutes:
            _checkpoint(run)
            last_ckpt = time.time()
    _checkpoint(run)
    if cfg.export:
        save_drafter(run.model, cfg.export)
        log(json.dumps({"event": "export", "path": str(cfg.export), "step": run.state["step"]}))
    return run.model
