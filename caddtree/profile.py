"""Measure this machine's cost model with the real target, drafter and round code (`caddtree profile`).

Per context length ℓ (KV cache prefilled with random tokens):
- C_v(n; ℓ): `verify.verify_tree` on a best-first tree of n nodes built from random marginals (real ancestor mask,
  root counted; n = 0 is the plain decoding step, timed after an untimed one as plain decoding runs it), cache
  cropped back after each call; the preset's sizes plus both sides of the first pass boundaries of the CPU kernel
  (`size_grid`), so the fit sees each pass's step;
- C_d(ℓ): one steady-state `drafter.propose` call that feeds only a few new tokens' features (LM head included),
  each right after a target step as in decoding; for a two-stage drafter also the first stage alone (`propose_cheap`
  + `skip_rest`), which the engine's draft gate prices;
- overhead(ℓ) + o_n · n: a round's bookkeeping with a tree of n nodes (tree build + `choose_tree_size` + the target's
  choices on its n + 1 rows + acceptance walk + cache compaction), timed at a small tree (OVERHEAD_SMALL nodes,
  what CaDDTree builds) and at the full budget: the line through the two points gives o_n per node (a median over
  ℓ) and the rest o(ℓ), charged to every round that verifies a tree.
  Why two sizes: priced at a full-budget build alone, every round looked ~2.4 ms dearer than it was (SmolLM2 on 2
  cores: 2.9 ms against 0.5-0.9 measured in decoding), which made a node's verify cost look relatively cheaper.
- o_plain(ℓ): the bookkeeping of a round that built the small tree and chose the plain step (the build and stop
  rule as in o, then the target's choice on the root's one row; nothing compacted), charged to the n = 0 option
  instead of o(ℓ). Priced at o, the plain option carried a tree's acceptance and compaction it does not pay, so a
  1-node tree looked ~0.4 ms cheaper against it than it is (AMD EPYC), which decides where Φ is ~0.1 a round.

Every figure is the median over repeats after warm-up (minima kept too, for audit). All ctx caches are prefilled first
and the whole (ℓ, n) grid is swept once per repeat, so load drifts of a shared machine hit every cell alike. While the
medians price a smaller tree more than DISTURBED above a larger one at the same ℓ (`inversion`), or stand more than
BUSY above their minima (`busy`), more sweeps are taken, up to 3x the preset's repeats; C_d likewise takes more calls.
C_v and the overhead belong to the target and the device: they are measured once into a shared verify profile and
every drafter's cost model is built on it (only C_d is measured per drafter). Why: docs/design.md.
"""
from __future__ import annotations

import copy
import datetime
import json
import platform
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import torch
import transformers
from tqdm import tqdm

from caddtree.accept import SamplingParams, accept_walk, target_choices
from caddtree.budget import choose_tree_size
from caddtree.costfile import default_cost_path, load_cost_model, plot_cost_model, save_cost_model
from caddtree.costmodel import VERIFY_FITS, CostModel, fit_cost_model
from caddtree.drafter import drafter_id
from caddtree.errors import CaddtreeError
from caddtree.files import atomic_write_text, cpu_name
from caddtree.kernels import VERSIONS, kernel_version, quant_row_group, row_group
from caddtree.target import crop_cache, prefill
from caddtree.tree import Tree, build_tree
from caddtree.verify import commit_path, now, verify_tree

PRESETS = {
    # first run on a fresh machine: < 1 min for SmolLM2 on 2 CPU cores
    "coarse": dict(ns=[*range(13), 16, 32, 64], ctxs=[128, 1024], repeats=9, warmup=2),
    "full": dict(ns=[0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256],
                 ctxs=[128, 512, 1024, 2048, 4096, 8192], repeats=5, warmup=2),
}
NEW_TOKENS = 4  # tokens fed to the drafter per steady-state round (a typical accepted length)
# C_d is timed this many times per context at least: a draft call costs milliseconds, and medians of 3 calls put the
# shipped drafter anywhere from 5.8 to 9.8 ms at ℓ = 128 in profiles of the same machine (medians of 15: 6.0 and
# 8.1 ms in two profiles an hour apart; the rest is the machine's state, as for C_v)
DRAFT_REPEATS = 15
OVERHEAD_SMALL = 8  # the small tree of the overhead's two sizes (CaDDTree's trees are mostly 1-8 nodes on CPUs)


def draft_calls(repeats: int) -> int:
    """Timed draft calls per context in a profile of `repeats` verify sweeps."""
    return max(repeats, DRAFT_REPEATS)


def verify_row_group(target) -> int:
    """Rows per pass of the kernel the target's linears run (1: PyTorch's, on CPU or GPU)."""
    if getattr(target, "weights", "fp32") == "native":
        return quant_row_group()
    return row_group() if getattr(target, "packed", False) else 1


def size_grid(ns, group: int, boundaries: int = 3) -> list[int]:
    """The tree sizes to profile: `ns`, 0 and 1, and both sides of the first `boundaries` pass boundaries of a kernel
    with `group` rows per pass (n = jg - 1: j full passes; n = jg: one row more), so the fit sees each jump."""
    n_max = max(ns)
    extra = [n for j in range(1, boundaries + 1) for n in (j * group - 1, j * group)] if group > 1 else []
    return sorted({0, 1, *map(int, ns), *(n for n in extra if n <= n_max)})


def device_label(target) -> str:
    """Profiles depend on the device and, on CPU, the thread count, the linear kernels, the weights (native GGUF
    blocks or fp32), the forward (HF's, lean, or lean2 with the C++ layer loop) and the dtype (named when not fp32)."""
    dev = target.device
    forward = f"-{target.lean.label}" if getattr(target, "lean", None) is not None else ""
    if target.dtype != torch.float32:  # fp32 keys stay as they were
        forward += f"-{str(target.dtype).removeprefix('torch.')}"
    if dev.type == "cuda":
        return f"cuda-{torch.cuda.get_device_name(dev).replace(' ', '_')}{forward}"
    kernel = f"-{kernel_version()}" if getattr(target, "packed", False) else ""
    if getattr(target, "weights", "fp32") == "native":
        kernel = f"-{VERSIONS['quant']}"
    return f"{dev.type}-t{torch.get_num_threads()}{kernel}{forward}"


def provenance(target, drafter, preset: str | None = None) -> dict:
    return {"target_fingerprint": target.fingerprint, "target": target.name,
            "drafter_id": "verify" if drafter is None else drafter_id(drafter),
            "device": device_label(target), "cpu": cpu_name(), "machine": platform.machine(),
            "torch_threads": torch.get_num_threads(), "torch": torch.__version__,
            "transformers": transformers.__version__, "python": platform.python_version(), "dtype": str(target.dtype),
            "preset": preset, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


DISTURBED = 0.10  # a smaller tree's median verify this much above a larger one's at the same ℓ: not a quiet profile
BUSY = 0.15  # timings' medians this much above their minima (median over cells): the machine was busy while profiling
BUSY_MIN_S = 1e-3  # draft calls faster than this (prompt lookup: ~0.3 ms) scatter by timer jitter, not load


def busy(times) -> float:
    """[repeats, ...] timings -> median over cells of (median / min over repeats) - 1: ~0.05 on a quiet machine
    (both cores of a bench busy included), far more while other load comes and goes."""
    if len(times) == 0:
        return 0.0
    t = np.asarray(times, dtype=np.float64).reshape(len(times), -1)
    return float(np.median(np.median(t, 0) / np.maximum(t.min(0), 1e-12)) - 1.0)


def _warn_busy(timed: str, load: float) -> None:
    print(f"caddtree: warning: the machine stayed busy through {timed} (timings {100 * load:.0f}% above their "
          "fastest): re-run `caddtree profile` when it is quieter", file=sys.stderr)


def inversion(verify_ms) -> float:
    """[ctxs, ns] median verify times, ns increasing -> the largest relative excess of a smaller tree's time over a
    larger tree's at the same ctx (0 when every row is non-decreasing in n)."""
    v = np.asarray(verify_ms, dtype=np.float64)
    later_min = np.minimum.accumulate(v[:, ::-1], axis=1)[:, ::-1]  # min over sizes >= n
    return float(max(0.0, np.max(v[:, :-1] / later_min[:, 1:] - 1.0))) if v.shape[1] > 1 else 0.0


def accept_and_compact(cache, ctx: int, tree: Tree, logits) -> float:
    """Seconds of a round's acceptance (the target's greedy choices on every row, the walk) and cache compaction
    after verifying `tree` on a cache of ctx tokens."""
    device = logits.device
    t0 = now(device)
    path, _ = accept_walk(tree.tokens, tree.parents, target_choices(logits, SamplingParams()))
    if len(tree):
        commit_path(cache, ctx, path, device)
    return now(device) - t0


def overhead_line(sizes: list[int], by_size: list[list[float]], plain: list[float] | None = None) -> dict:
    """The overhead's measurements from its medians by_size [ctx][size] (ms) at tree sizes `sizes` (one or two):
    the per-node part o_n (the line through the two sizes, median over ℓ, >= 0) and the rest per ℓ (>= 0); plain
    [ctx] (optional): the plain option's overhead per ℓ, kept as measured."""
    o = np.asarray(by_size, dtype=np.float64)
    node = 0.0
    if len(sizes) == 2 and sizes[1] > sizes[0]:
        node = max(float(np.median((o[:, 1] - o[:, 0]) / (sizes[1] - sizes[0]))), 0.0)
    rest = np.maximum(o[:, 0] - node * sizes[0], 0.0)
    return {"overhead_ms": rest.round(4).tolist(), "overhead_node_ms": round(node, 5),
            "overhead_sizes": list(sizes), "overhead_by_size_ms": o.tolist(),
            **({} if plain is None else {"overhead_plain_ms": np.round(plain, 4).tolist()})}


@torch.inference_mode()
def profile_verify(target, ns, ctxs, repeats: int = 3, warmup: int = 1, progress: bool = True, seed: int = 0,
                   depth: int = 8) -> dict:
    """The target's side of the cost model: C_v over ns x ctxs and the per-round overhead per ctx (median ms).

    Measured once per (target, device) and shared by every drafter, so two drafters are never priced on two noisy
    measurements of the same forward. Run without feature outputs (hidden_layers = []): asking for three layers'
    outputs did not change a 4-node verify here (SmolLM2, 300-token context: 91.6 vs 91.8 ms, medians of 15)."""
    group = verify_row_group(target)
    ns = size_grid(ns, group)
    n_max = ns[-1]
    # room for the draft timing too: each of its calls adds NEW_TOKENS tokens, twice for a two-stage drafter
    limit = target.max_context - n_max - 2 * NEW_TOKENS * (warmup + draft_calls(repeats)) - 2
    ctxs = sorted({min(int(c), limit) for c in ctxs})
    if ctxs[0] < 1:
        raise CaddtreeError(f"context window {target.max_context} too small to profile {n_max} tree nodes")
    device, V = target.device, target.vocab_size
    g = torch.Generator().manual_seed(seed)
    saved_layers = target.hidden_layers
    target.hidden_layers = []
    flat = CostModel([1], np.ones((1, n_max + 1)), np.zeros(n_max + 1), [0.0], [0.0])  # for timing the stop rule
    lp = torch.log_softmax(torch.randn(depth if n_max else 1, V, generator=g) * 3.0, dim=-1)
    full = build_tree(lp, n_max) if n_max else Tree.empty()
    trees = {n: full.prefix(n) for n in ns}
    booked = sorted({max(n for n in ns if n <= OVERHEAD_SMALL), n_max})  # the overhead's tree sizes (docstring)
    max_sweeps = warmup + 3 * repeats  # more sweeps only while the medians look disturbed (module docstring)
    times = np.zeros((max_sweeps, len(ctxs), len(ns)))
    over = np.zeros((max_sweeps, len(ctxs), len(booked)))
    over_plain = np.zeros((max_sweeps, len(ctxs)))  # the plain option's, after the small tree's build
    bar = tqdm(total=len(ctxs) * (warmup + repeats) * (len(ns) + 1), desc="profiling verify cost",
               disable=not progress, unit="run", file=sys.stderr)
    try:
        caches = []  # one prefilled KV cache per ctx, kept together so every sweep below covers the whole grid
        for ctx in ctxs:
            ids = torch.randint(0, V, (ctx + 1,), generator=g).to(device)
            cache = target.new_cache()
            prefill(target, cache, ids[:-1])
            caches.append((cache, int(ids[-1])))
        # sweep the whole (ctx, n) grid once per repeat: load changes on a shared machine hit every cell alike
        sweeps = 0
        while sweeps < warmup + repeats or (sweeps < max_sweeps and (
                inversion(np.median(times[warmup:sweeps], 0)) > DISTURBED or busy(times[warmup:sweeps]) > BUSY)):
            r, sweeps = sweeps, sweeps + 1
            if r >= warmup + repeats:
                bar.total += len(ctxs) * (len(ns) + 1)
            for ci, (ctx, (cache, root)) in enumerate(zip(ctxs, caches)):
                # untimed: the row's plain step comes after a plain step, as in plain decoding, not after the last
                # row's largest tree (whose [n_max, V] logits push the weights out of cache: C_v(0) 9.6 against
                # 7.7 ms on a Xeon whose L3 holds the model; docs/results.md)
                verify_tree(target, cache, root, Tree.empty())
                crop_cache(cache, ctx)
                for ni, n in enumerate(ns):
                    t0 = now(device)
                    verify_tree(target, cache, root, trees[n])
                    times[r, ci, ni] = now(device) - t0
                    crop_cache(cache, ctx)
                    bar.update()
                # the overhead: tree build + stop rule, then acceptance + compaction on the logits of a verify of
                # its own, untimed. Not on a timed cell's logits: compaction inside the row inflated the next cell
                # (the next sweep's plain step after the 256-node one: C_v(0) 10.5-11.5 ms against 7.7-8.9)
                for k, n in enumerate(booked):
                    t0 = now(device)
                    tree = build_tree(lp, n) if n else Tree.empty()
                    choose_tree_size(tree.log_weights, flat, ctx)
                    build = over[r, ci, k] = now(device) - t0
                    logits, _ = verify_tree(target, cache, root, trees[n])
                    over[r, ci, k] += accept_and_compact(cache, ctx, trees[n], logits)
                    crop_cache(cache, ctx)
                    if k == 0:  # the plain option after the same build: the choice on one row, nothing compacted
                        logits, _ = verify_tree(target, cache, root, Tree.empty())
                        over_plain[r, ci] = build + accept_and_compact(cache, ctx, Tree.empty(), logits)
                        crop_cache(cache, ctx)
                bar.update()
    finally:
        target.hidden_layers = saved_layers
        bar.close()
    times, over, over_plain = times[:sweeps], over[:sweeps], over_plain[:sweeps]
    ms = lambda a, f: (1000 * f(a[warmup:], axis=0)).round(3).tolist()  # noqa: E731
    verify_ms = ms(times, np.median)
    inv, load = inversion(verify_ms), busy(times[warmup:])
    if inv > DISTURBED:
        print(f"caddtree: warning: the verify profile stayed disturbed after {sweeps - warmup} sweeps (a smaller tree "
              f"measured {100 * inv:.0f}% over a larger one): re-run `caddtree profile` when the machine is quieter",
              file=sys.stderr)
    elif load > BUSY:
        _warn_busy(f"{sweeps - warmup} verify sweeps", load)
    return {"ns": ns, "ctxs": ctxs, "verify_ms": verify_ms,
            **overhead_line(booked, ms(over, np.median), ms(over_plain, np.median)),
            "verify_min_ms": ms(times, np.min), "repeats": repeats, "warmup": warmup, "row_group": group,
            "sweeps": sweeps - warmup, "inversion": round(inv, 4), "busy": round(load, 4)}


@torch.inference_mode()
def profile_draft(target, drafter, ctxs, repeats: int = 3, warmup: int = 1, seed: int = 0) -> dict:
    """The drafter's side: C_d per ctx (median ms of at least DRAFT_REPEATS calls, each after a target step as in
    decoding), and its first stage's alone for a two-stage drafter."""
    g = torch.Generator().manual_seed(seed + 1)
    saved_layers = target.hidden_layers
    target.hidden_layers = list(drafter.target_layers)  # as the engine runs it for speculative methods
    draft, cheap = [], []
    try:
        for ctx in ctxs:
            ids = torch.randint(0, target.vocab_size, (ctx + 1,), generator=g).to(target.device)
            cache = target.new_cache()
            feats = prefill(target, cache, ids[:-1])
            d, c = _draft_ms(target, drafter, ids, feats, warmup, draft_calls(repeats), g, cache)
            draft.append(round(d, 3)), cheap.append(round(c, 3))
    finally:
        target.hidden_layers = saved_layers
    return {"draft_ms": draft, "new_tokens_per_draft": NEW_TOKENS,
            **({"cheap_draft_ms": cheap} if hasattr(drafter, "propose_cheap") else {})}


def profile_costs(target, drafter, ns, ctxs, repeats: int = 3, warmup: int = 1, progress: bool = True,
                  seed: int = 0) -> dict:
    """Both sides at once (`fit_cost_model` input): `profile_verify` + `profile_draft` on the same ctx grid."""
    meas = profile_verify(target, ns, ctxs, repeats, warmup, progress, seed)
    return {**meas, **profile_draft(target, drafter, meas["ctxs"], repeats, warmup, seed)}


def _draft_ms(target, drafter, ids, feats, warmup, repeats, g, cache) -> tuple[float, float]:
    """Steady-state drafting at context len(ids) - 1: reset + one full call (untimed), then calls that each add
    NEW_TOKENS committed tokens and their target features. Returns (C_d, C_d of the first stage alone): a two-stage
    drafter (`propose_cheap`) times its first stage in the same loop, else the second figure is 0.

    Each call follows a one-token target step on `cache` (untimed, then cropped off), as every draft follows a
    verify in decoding: the target's weight stream leaves the drafter's weights out of the CPU caches (back to back
    from warm caches: 6.1-7.6 against 7.7-7.9 ms at ℓ = 128 in two profiles here). Random tokens still make this
    C_d a little high (8.1 ms at ℓ = 128 where drafts took 7.7 in decoding, docs/design.md: prompt lookup
    finds no match and scans the whole context); a CaDDTree pricing drafts at their measured cost was no faster
    (docs/design.md).

    Timed on a copy: drafters may learn from what they see (prompt lookup calibrates its confidence against the
    committed tokens), and random profiling tokens must not teach the drafter used for generation."""
    drafter = copy.deepcopy(drafter)
    device = target.device
    tokens = ids.clone()
    drafter.reset(tokens)
    drafter.propose(tokens, feats)
    width = feats.shape[-1] if feats is not None else 0
    two_stage = hasattr(drafter, "propose_cheap")
    times, cheap = [], []
    ctx = cache.get_seq_length()  # restored after every target step
    step = (2 if two_stage else 1) * NEW_TOKENS
    room = lambda: len(tokens) + step + getattr(drafter, "num_positions", 0) < target.max_context  # noqa: E731
    loaded = lambda: busy(times) > BUSY and np.median(times) >= BUSY_MIN_S  # noqa: E731  (`busy`: module docstring)
    r = 0
    while r < warmup + repeats or (r < warmup + 3 * repeats and loaded() and room()):
        r += 1
        for stage in ("full", "cheap") if two_stage else ("full",):
            tokens = torch.cat([tokens, torch.randint(0, target.vocab_size, (NEW_TOKENS,), generator=g).to(device)])
            new_feats = torch.randn(NEW_TOKENS, width, generator=g).to(device, target.dtype) if width else None
            committed = tokens.tolist() if stage == "cheap" else None  # the decoder's list, as it passes it
            target.forward(ids[-1:], cache)
            crop_cache(cache, ctx)
            t0 = now(device)
            if stage == "full":
                drafter.propose(tokens, new_feats)
            else:  # the first stage, then the second stage skipped (it keeps the features for later)
                drafter.propose_cheap(committed)
                drafter.skip_rest(new_feats)
            if r > warmup:
                (times if stage == "full" else cheap).append(now(device) - t0)
    if loaded():
        _warn_busy(f"{len(times)} timed draft calls", busy(times))
    return 1000 * float(np.median(times)), 1000 * float(np.median(cheap)) if cheap else 0.0


# /2: each row's plain step timed after an untimed plain step (`profile_verify`); /1 timed it right after the last
# row's largest tree and overpriced it, so a cached /1 profile is measured again (and the drafters' rebuilt on it)
VERIFY_FORMAT = "caddtree-verify/2"


def verify_profile_path(target) -> Path:
    """Per-user cache path of the shared verify profile of (target, device)."""
    return default_cost_path(target.fingerprint, "verify", device_label(target))


def _load_verify(target) -> dict | None:
    """The shared verify profile {"provenance", "measurements"} of this target and device, or None (absent,
    unreadable, or made before the overhead's per-node part or a plain step's overhead was measured: then it is
    measured again)."""
    path = verify_profile_path(target)
    try:
        doc = json.loads(path.read_text())
        prov = doc["provenance"]
        if (doc.get("format") == VERIFY_FORMAT and prov["target_fingerprint"] == target.fingerprint
                and prov["verify_id"] and doc["measurements"].get("row_group", 1) == verify_row_group(target)
                and overheads_measured(doc["measurements"])
                and covers_preset(doc["measurements"], prov.get("preset"))):
            fit_cost_model({**doc["measurements"], "draft_ms": 0.0})  # shape checks of the measurements
            return doc
    except (OSError, ValueError, KeyError, TypeError, AttributeError, CaddtreeError):
        pass
    return None


def overheads_measured(meas: dict) -> bool:
    """Whether measurements hold the overhead as priced now: without its per-node part every round was priced at a
    full-budget build; without the plain option's own overhead, plain steps at a tree round's. Else measured again."""
    return "overhead_node_ms" in meas and "overhead_plain_ms" in meas


def covers_preset(meas: dict, preset: str | None) -> bool:
    """Whether verify measurements hold every size and sweep their preset asks for now: one measured under an older,
    smaller version of it is measured again (the coarse preset before every size 0-12 and 9 sweeps priced 7-10-node
    trees 2-4% low against 5-node ones, by decoding's own verify times: docs/design.md)."""
    args = PRESETS.get(preset)
    if args is None:
        return True
    grid = size_grid(args["ns"], meas.get("row_group", 1))
    return set(grid) <= set(meas["ns"]) and meas.get("repeats", 0) >= args["repeats"]


def _measure_verify(target, preset: str, progress: bool) -> dict:
    t0 = time.perf_counter()
    meas = profile_verify(target, progress=progress, **PRESETS[preset])
    meas["profile_s"] = round(time.perf_counter() - t0, 1)
    prov = {**provenance(target, None, preset), "verify_id": uuid.uuid4().hex[:12]}
    doc = {"format": VERIFY_FORMAT, "provenance": prov, "measurements": meas}
    path = atomic_write_text(verify_profile_path(target), json.dumps(doc, indent=1))
    print(f"cost model: verify cost measured ({preset} preset, {meas['sweeps']} sweeps, {100 * meas['busy']:.0f}% busy, "
          f"{meas['profile_s']} s) -> {path}", file=sys.stderr)
    return doc


DRAFT_KEYS = ("draft_ms", "cheap_draft_ms", "new_tokens_per_draft")  # a cost profile's drafter-side measurements


def _draft_measurements(model: CostModel | None, verify: dict) -> dict | None:
    """The drafter-side measurements of a cached cost profile, if they can be refitted on the verify profile
    `verify` (its measurements): timed on the same ctx grid, with the same kernel pass size. Else None."""
    if model is None:
        return None
    m = model.measurements
    same_grid = ([int(c) for c in m.get("ctxs", [])] == [int(c) for c in verify["ctxs"]]
                 and m.get("row_group", 1) == verify.get("row_group", 1))
    return {k: m[k] for k in DRAFT_KEYS if k in m} if same_grid and "draft_ms" in m else None


def ensure_cost_model(target, drafter, path=None, preset: str = "coarse", progress: bool = True,
                      force: bool = False) -> CostModel:
    """The cost model for (target, drafter, this device): the cached profile if valid, else (or if `force`)
    profile + fit + save, with a PNG of the fit beside the JSON.

    The verify cost (C_v, overhead) comes from the one shared verify profile of (target, device), measured on first
    need (and again if `force`, or if it was measured for another kernel pass size); only C_d is measured per
    drafter. A cached drafter profile whose verify part is older than the shared one (or of another pass size) is
    rebuilt on it, so all drafters stay priced on the same C_v: refitted with its own C_d kept where that was timed
    on the shared profile's ctx grid and pass size (C_d is the drafter's cost, not the verify profile's), else with
    C_d measured again (seconds). Keeping it makes the rebuild deterministic: processes that start together after a
    new verify profile (e.g. one `caddtree bench --part` per core) all price with the same model instead of each
    timing C_d anew under the other's load. A missing file is profiled into; an existing but invalid one raises
    (CaddtreeError) if `path` was given, while the default cache entry is re-profiled instead. Prints one line
    (stderr) per step taken.
    """
    if preset not in PRESETS:
        raise CaddtreeError(f"unknown profile preset '{preset}': choose one of {', '.join(PRESETS)}")
    did = drafter_id(drafter)
    explicit = path is not None
    path = Path(path) if explicit else default_cost_path(target.fingerprint, did, device_label(target))
    shared = None if force else _load_verify(target)
    stale_model = None  # a cached profile built on an older verify profile: its C_d may be kept
    if path.is_file() and not force:
        try:
            model = load_cost_model(path, target_fingerprint=target.fingerprint, drafter_id=did)
            if hasattr(drafter, "propose_cheap") and model.cheap_draft is None:
                raise CaddtreeError(f"cost profile {path} has no first-stage draft cost for this two-stage drafter: "
                                    f"re-run `caddtree profile`")
            stale = not explicit and (
                model.measurements.get("row_group", 1) != verify_row_group(target)  # measured for another kernel
                or model.verify_fit != VERIFY_FITS[0]  # fitted to another shape (before the monotone default)
                or not covers_preset(model.measurements, model.provenance.get("preset"))  # an older, smaller preset
                or not overheads_measured(model.measurements)
                or (shared is not None and model.provenance.get("verify_id") != shared["provenance"]["verify_id"]))
            if not stale:
                print(f"cost model: loaded {path} (profiled {model.provenance.get('date', '?')}, "
                      f"max {model.max_nodes} nodes)", file=sys.stderr)
                return model
            print(f"cost model: {path} predates the shared verify profile, its preset's grid, the "
                  f"{VERIFY_FITS[0]} fit or the per-node and plain-step overheads; rebuilding on it", file=sys.stderr)
            stale_model = model
        except CaddtreeError as e:
            if explicit:
                raise
            print(f"cost model: cached profile unusable ({e}); re-profiling", file=sys.stderr)
    if shared is None:
        shared = _measure_verify(target, preset, progress)
    v = shared["measurements"]
    prov = {**provenance(target, drafter, shared["provenance"].get("preset")),
            "verify_id": shared["provenance"]["verify_id"], "verify_date": shared["provenance"]["date"]}
    draft = _draft_measurements(stale_model, v)
    if draft is not None:
        prov["draft_date"] = stale_model.provenance.get("draft_date", stale_model.provenance.get("date"))
        print(f"cost model: C_d of {did} kept (timed {prov['draft_date']}), refitted on the verify profile of "
              f"{prov['verify_date']} -> {path}", file=sys.stderr)
    else:
        print(f"cost model: measuring C_d of {did} -> {path}", file=sys.stderr)
        preset_args = PRESETS.get(shared["provenance"].get("preset"), PRESETS[preset])
        draft = profile_draft(target, drafter, v["ctxs"], preset_args["repeats"], preset_args["warmup"])
        prov["draft_date"] = prov["date"]
    meas = {**v, **draft}
    model = fit_cost_model(meas, prov)
    save_cost_model(model, path)
    plot_cost_model(model, path.with_suffix(".png"))
    return model
