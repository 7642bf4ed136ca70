"""Measure this machine's cost model with the real target, drafter and engine code paths (`caddtree profile`).

Per context length ℓ (KV cache prefilled with random tokens):
- C_v(n; ℓ): `engine.verify_tree` on a best-first tree of n nodes built from random marginals (real ancestor mask,
  root counted; n = 0 is the plain decoding step), cache cropped back after each call;
- C_d(ℓ): one steady-state `drafter.propose` call that feeds only a few new tokens' features (LM head included);
  the drafter's context grows by those few tokens per call, negligible against ℓ; for a two-stage drafter also the
  first stage alone (`propose_cheap` + `skip_rest`), which the engine's draft gate prices;
- overhead(ℓ): tree build at the full budget + `choose_tree_size` + acceptance walk + cache compaction
  (`target.compact_cache`, O(accepted) copies). It is charged to every round, though an n = 0 round compacts
  nothing: slightly pessimistic for plain steps.
Every figure is the median over repeats after warm-up (minima kept too, for audit). All ctx caches are prefilled first
and the whole (ℓ, n) grid is swept once per repeat, so load drifts of a shared machine hit every cell alike instead
of bending the curves.
"""
from __future__ import annotations

import copy
import dataclasses
import datetime
import hashlib
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

from caddtree.costmodel import (CostModel, default_cost_path, fit_cost_model, load_cost_model, plot_cost_model,
                                save_cost_model)
from caddtree.errors import CaddtreeError
from caddtree.kernels import KERNELS

PRESETS = {
    # first run on a fresh machine: < 1 min for SmolLM2 on 2 CPU cores
    "coarse": dict(ns=[0, 1, 2, 4, 8, 16, 32, 64], ctxs=[128, 1024], repeats=3, warmup=1),
    "full": dict(ns=[0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256],
                 ctxs=[128, 512, 1024, 2048, 4096, 8192], repeats=5, warmup=2),
}
NEW_TOKENS = 4  # tokens fed to the drafter per steady-state round (a typical accepted length)


def drafter_id(drafter) -> str:
    """Stable id of a drafter's cost: its own `fingerprint` if it has one, else class name + hash of its config
    (a dataclass attribute, e.g. DFlash's architecture: retrained weights cost the same) or, failing that, of its
    scalar settings. Never of run state such as a drafter KV cache."""
    fp = getattr(drafter, "fingerprint", None)
    if fp:
        return str(fp)
    cfg = next((v for v in vars(drafter).values() if dataclasses.is_dataclass(v) and not isinstance(v, type)), None)
    settings = dataclasses.asdict(cfg) if cfg is not None else {
        k: v for k, v in vars(drafter).items() if isinstance(v, (int, float, str, bool)) and not k.startswith("_")}
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:12]
    return f"{type(drafter).__name__}-{digest}"


def device_label(target) -> str:
    """Profiles depend on the device and, on CPU, the thread count and the linear kernels."""
    dev = target.device
    if dev.type == "cuda":
        return f"cuda-{torch.cuda.get_device_name(dev).replace(' ', '_')}"
    return f"{dev.type}-t{torch.get_num_threads()}" + (f"-{KERNELS}" if getattr(target, "packed", False) else "")


def _cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def provenance(target, drafter, preset: str | None = None) -> dict:
    import transformers
    return {"target_fingerprint": target.fingerprint, "target": target.name, "drafter_id": drafter_id(drafter),
            "device": device_label(target), "cpu": _cpu_name(), "machine": platform.machine(),
            "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
            "transformers": transformers.__version__, "python": platform.python_version(), "dtype": str(target.dtype),
            "preset": preset, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def _prefill(target, cache, ids: torch.Tensor, chunk: int = 512):
    """Fill the cache with ids in chunks (bounded attention memory); returns the features of all ids or None."""
    feats = []
    for i in range(0, len(ids), chunk):
        _, f = target.forward(ids[i:i + chunk], cache)
        if f is not None:
            feats.append(f)
    return torch.cat(feats) if feats else None


def _crop_to(cache, ctx: int) -> None:
    extra = cache.get_seq_length() - ctx
    if extra > 0:
        cache.crop(-extra)  # transformers 5: a negative count removes that many trailing tokens


@torch.inference_mode()
def profile_costs(target, drafter, ns, ctxs, repeats: int = 3, warmup: int = 1, progress: bool = True,
                  seed: int = 0) -> dict:
    """Measure C_v over ns x ctxs, C_d and the overhead per ctx (median ms). Returns `fit_cost_model` input."""
    from tqdm import tqdm

    from caddtree.accept import SamplingParams, accept_walk, target_choices
    from caddtree.budget import choose_tree_size
    from caddtree.engine import _now, commit_path, verify_tree
    from caddtree.tree import Tree, build_tree

    ns = sorted({0, *map(int, ns)})
    n_max = ns[-1]
    limit = target.max_context - n_max - NEW_TOKENS * (warmup + repeats) - 2
    ctxs = sorted({min(int(c), limit) for c in ctxs})
    if ctxs[0] < 1:
        raise CaddtreeError(f"context window {target.max_context} too small to profile {n_max} tree nodes")
    device, V = target.device, target.vocab_size
    g = torch.Generator().manual_seed(seed)
    saved_layers = target.hidden_layers
    target.hidden_layers = list(drafter.target_layers)  # as the engine runs it for speculative methods
    depth = max(int(getattr(drafter, "num_positions", 0) or 0), 1) if n_max else 1
    flat = CostModel([1], np.ones((1, n_max + 1)), np.zeros(n_max + 1), [0.0], [0.0])  # for timing the stop rule
    lp = torch.log_softmax(torch.randn(depth, V, generator=g) * 3.0, dim=-1)
    full = build_tree(lp, n_max) if n_max else Tree.empty()
    trees = {n: full.prefix(n) for n in ns}
    mid = trees[ns[len(ns) // 2]]  # the tree whose acceptance + compaction is timed
    times = np.zeros((warmup + repeats, len(ctxs), len(ns)))
    over = np.zeros((warmup + repeats, len(ctxs)))
    draft, cheap = np.zeros(len(ctxs)), np.zeros(len(ctxs))
    bar = tqdm(total=len(ctxs) * (warmup + repeats) * (len(ns) + 2), desc="profiling costs", disable=not progress,
               unit="run", file=sys.stderr)
    try:
        caches = []  # one prefilled KV cache per ctx, kept together so every sweep below covers the whole grid
        for ctx in ctxs:
            bar.set_description(f"profiling costs (prefill ℓ={ctx})")
            ids = torch.randint(0, V, (ctx + 1,), generator=g).to(device)
            cache = target.new_cache()
            feats = _prefill(target, cache, ids[:-1])
            draft[len(caches)], cheap[len(caches)] = _draft_ms(target, drafter, ids, feats, warmup, repeats, g, bar)
            caches.append((cache, int(ids[-1])))
        bar.set_description("profiling costs")
        # sweep the whole (ctx, n) grid once per repeat: load changes on a shared machine hit every cell alike
        for r in range(warmup + repeats):
            for ci, (ctx, (cache, root)) in enumerate(zip(ctxs, caches)):
                for ni, n in enumerate(ns):
                    t0 = _now(device)
                    verify_tree(target, cache, root, trees[n])
                    times[r, ci, ni] = _now(device) - t0
                    _crop_to(cache, ctx)
                    bar.update()
                # overhead: tree build at the full budget + stop rule, then acceptance + compaction
                t0 = _now(device)
                tree = build_tree(lp, n_max) if n_max else Tree.empty()
                choose_tree_size(tree.log_weights, flat, ctx)
                t_build = _now(device) - t0
                logits, _ = verify_tree(target, cache, root, mid)
                t0 = _now(device)
                path, _ = accept_walk(mid.tokens, mid.parents, target_choices(logits, SamplingParams()))
                if len(mid):
                    commit_path(cache, ctx, path, device)
                over[r, ci] = t_build + _now(device) - t0
                _crop_to(cache, ctx)
                bar.update()
    finally:
        target.hidden_layers = saved_layers
        bar.close()
    ms = lambda a, f: (1000 * f(a[warmup:], axis=0)).round(3).tolist()  # noqa: E731
    return {"ns": ns, "ctxs": ctxs, "verify_ms": ms(times, np.median), "draft_ms": draft.round(3).tolist(),
            "overhead_ms": ms(over, np.median), "verify_min_ms": ms(times, np.min), "new_tokens_per_draft": NEW_TOKENS,
            "repeats": repeats, "warmup": warmup,
            **({"cheap_draft_ms": cheap.round(3).tolist()} if hasattr(drafter, "propose_cheap") else {})}


def _draft_ms(target, drafter, ids, feats, warmup, repeats, g, bar) -> tuple[float, float]:
    """Steady-state drafting at context len(ids) - 1: reset + one full call (untimed), then calls that each add
    NEW_TOKENS committed tokens and their target features. Returns (C_d, C_d of the first stage alone): a two-stage
    drafter (`propose_cheap`) times its first stage in the same loop, else the second figure is 0.

    Timed on a copy: drafters may learn from what they see (prompt lookup calibrates its confidence against the
    committed tokens), and random profiling tokens must not teach the drafter used for generation."""
    from caddtree.engine import _now
    drafter = copy.deepcopy(drafter)
    device = target.device
    tokens = ids.clone()
    drafter.reset(tokens)
    drafter.propose(tokens, feats)
    width = feats.shape[-1] if feats is not None else 0
    two_stage = hasattr(drafter, "propose_cheap")
    times, cheap = [], []
    for r in range(warmup + repeats):
        for stage in ("full", "cheap") if two_stage else ("full",):
            tokens = torch.cat([tokens, torch.randint(0, target.vocab_size, (NEW_TOKENS,), generator=g).to(device)])
            new_feats = torch.randn(NEW_TOKENS, width, generator=g).to(device, target.dtype) if width else None
            t0 = _now(device)
            if stage == "full":
                drafter.propose(tokens, new_feats)
            else:  # the first stage, then the second stage skipped (it keeps the features for later)
                drafter.propose_cheap(tokens)
                drafter.skip_rest(new_feats)
            if r >= warmup:
                (times if stage == "full" else cheap).append(_now(device) - t0)
        bar.update()
    return 1000 * float(np.median(times)), 1000 * float(np.median(cheap)) if cheap else 0.0


def ensure_cost_model(target, drafter, path=None, preset: str = "coarse", progress: bool = True,
                      force: bool = False) -> CostModel:
    """The cost model for (target, drafter, this device): the cached profile if valid, else (or if `force`)
    profile + fit + save, with a PNG of the fit beside the JSON.

    A missing file is profiled into; an existing but invalid one raises (CaddtreeError) if `path` was given, while
    the default cache entry is re-profiled instead.
    Prints one line (stderr) saying which happened.
    """
    if preset not in PRESETS:
        raise CaddtreeError(f"unknown profile preset '{preset}': choose one of {', '.join(PRESETS)}")
    did = drafter_id(drafter)
    explicit = path is not None
    path = Path(path) if explicit else default_cost_path(target.fingerprint, did, device_label(target))
    if path.is_file() and not force:
        try:
            model = load_cost_model(path, target_fingerprint=target.fingerprint, drafter_id=did)
            if hasattr(drafter, "propose_cheap") and model.cheap_draft is None:
                raise CaddtreeError(f"cost profile {path} has no first-stage draft cost for this two-stage drafter: "
                                    f"re-run `caddtree profile`")
            print(f"cost model: loaded {path} (profiled {model.provenance.get('date', '?')}, "
                  f"max {model.max_nodes} nodes)", file=sys.stderr)
            return model
        except CaddtreeError as e:
            if explicit:
                raise
            print(f"cost model: cached profile unusable ({e}); re-profiling", file=sys.stderr)
    why = "re-profiling as asked" if force else "none for this target/drafter/device"
    print(f"cost model: {why}, profiling ({preset} preset) -> {path}", file=sys.stderr)
    t0 = time.perf_counter()
    meas = profile_costs(target, drafter, progress=progress, **PRESETS[preset])
    meas["profile_s"] = round(time.perf_counter() - t0, 1)
    model = fit_cost_model(meas, provenance(target, drafter, preset))
    save_cost_model(model, path)
    plot_cost_model(model, path.with_suffix(".png"))
    return model
