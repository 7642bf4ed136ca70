"""`caddtree bench`: every method side by side on the paper's benchmarks, peers included.

For each prompt all methods run back to back (same prompt, same machine state), so slow drifts of a shared machine
hit every method alike. One JSON record per (dataset, method, prompt) is appended to DIR/records.jsonl as soon as it
finishes; a rerun with the same --out skips the (dataset, method, prompt id, config) keys already there. Prompts run
round-robin over the datasets (prompt 0 of each, then prompt 1, ...), so a partial run covers every dataset; `--part
I/K` runs every K-th of them in one of K processes (one per core), each appending to DIR/records.partIofK.jsonl.

Methods: `ar` (plain decoding, our engine), `ddtree:B` (fixed tree budget B, the --drafter), `caddtree` (cost-aware
budget, the --drafter); a prefix picks another drafter for the same two: `lookup-` (prompt lookup), `dflash-` (the
shipped DFlash drafter), `mix-` (DFlash + prompt lookup, `--drafter dflash+lookup`), e.g. `lookup-caddtree`;
`caddtree@cd0.5` / `@cd2` / `@cv0.5` / `@cv2` (cost model perturbed: C_d, or the C_v slope in n, scaled; --perturb),
`caddtree@nogate` (a two-stage drafter such as `mix` runs both stages every round: no `budget.DraftGate`),
`caddtree@predgate` (the gate learns from the policy's predicted gains instead of the realised ones),
`caddtree@cal` (Φ priced by the acceptance rates observed per predicted δ: `budget.PhiCalibration`),
`caddtree@convex` / `@passes` / `@mono` (C_v refitted from the same measurements: convex (the paper's fit), convex
plus a jump per kernel pass (the default before results/bench-intel-monofit), monotone (the default)),
peers `hf` / `hf-lookup` (Hugging Face `generate`, plain / prompt_lookup_num_tokens=10) and `llamacpp`
(llama-cpp-python on the same GGUF, if importable).

Timing rule (every method): decode time per output token, prefill excluded. Our engine: the sum of round times over
the tokens emitted (the first round, which emits token 1 from the prompt's last token, included). HF `generate`
can only be timed end to end: t(generate N tokens) - t(generate 1 token), over N - 1 tokens; llama.cpp streams its
tokens: time from token 1 to token N, over N - 1 tokens.
τ: tokens emitted per round (bonus token counted).
"""
from __future__ import annotations

import csv
import datetime
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from caddtree.errors import CaddtreeError

ALL_DATASETS = "math500,gsm8k,aime25,humaneval,mbpp,livecodebench,mt_bench,alpaca"
DEFAULT_METHODS = "ar,ddtree:8,16,32,64,caddtree"
QUICK = dict(num_prompts=1, max_new_tokens=16, methods="ar,ddtree:4,caddtree")
PERTURB = {"cd0.5": (0.5, 1.0), "cd2": (2.0, 1.0), "cv0.5": (1.0, 0.5), "cv2": (1.0, 2.0)}  # (C_d, C_v slope) scale
VARIANTS = {"nogate": {"gate": False}, "predgate": {"gate": "predicted"},  # method suffix -> Decoder(**kw)
            "cal": {"calibrate_phi": True}}
REFITS = {"convex": {"row_group": 1, "verify_fit": "convex"}, "passes": {"verify_fit": "convex"},  # method suffix ->
          "mono": {"verify_fit": "monotone"}}  # the cost model refitted from its measurements with these
PEERS = ("hf", "hf-lookup", "llamacpp")
DRAFTER_PREFIX = {"lookup": "lookup", "dflash": "dflash", "mix": "dflash+lookup"}  # method prefix -> --drafter spec
TREE_METHODS = ("ddtree",) + tuple(f"{p}-ddtree" for p in DRAFTER_PREFIX)
COST_METHODS = ("caddtree",) + tuple(f"{p}-caddtree" for p in DRAFTER_PREFIX)


# ---------------------------------------------------------------------------------------------------------- methods

def parse_methods(spec: str) -> list[str]:
    """'ar,ddtree:8,16,caddtree' -> ['ar', 'ddtree:8', 'ddtree:16', 'caddtree'] (bare numbers extend the last
    budgeted method)."""
    out, last = [], None
    for tok in (t.strip() for t in spec.split(",")):
        if not tok:
            continue
        if tok.isdigit():
            if last is None:
                raise CaddtreeError(f"--methods: budget {tok} follows no 'ddtree:B' method")
            tok = f"{last}:{tok}"
        name, _, arg = tok.partition(":")
        if name in TREE_METHODS:
            if not arg.isdigit() or int(arg) < 1:
                raise CaddtreeError(f"--methods: '{tok}' needs a budget >= 1, e.g. {name}:32")
            last = name
        else:
            last = None
            base, _, pert = name.partition("@")
            if arg or base not in ("ar", *COST_METHODS, *PEERS) or (pert and (
                    base not in COST_METHODS or pert not in (*PERTURB, *VARIANTS, *REFITS))):
                variants = ",".join((*PERTURB, *VARIANTS, *REFITS))
                raise CaddtreeError(f"--methods: unknown method '{tok}' (ar, ddtree:B, caddtree, "
                                    f"caddtree@{{{variants}}}, the same with a drafter prefix "
                                    f"{'-, '.join(DRAFTER_PREFIX)}- (e.g. lookup-caddtree), hf, hf-lookup, llamacpp)")
        if tok not in out:
            out.append(tok)
    if not out:
        raise CaddtreeError("--methods is empty")
    return out


def perturb_cost_model(model, draft_scale: float = 1.0, slope_scale: float = 1.0):
    """A copy of `model` with C_d (both stages' of a two-stage drafter) scaled and the C_v slope in n scaled above
    n = 1 (C_v(0), the plain step, and C_v(1) kept): C_v'(n) = C_v(1) + s (C_v(n) - C_v(1)), the kernel's pass
    jumps included; the ℓ-extrapolation slopes get the same map."""
    from caddtree.costmodel import CostModel, check_cost_model
    v = model.verify.copy()
    v[:, 1:] = v[:, 1:2] + slope_scale * (v[:, 1:] - v[:, 1:2])
    v = np.maximum.accumulate(v, axis=0)  # keep it non-decreasing in ℓ
    s = model.verify_slope.copy()
    s[1:] = s[1:2] + slope_scale * (s[1:] - s[1:2])
    cheap = None if model.cheap_draft is None else model.cheap_draft * draft_scale
    out = CostModel(model.ctxs, v, s, model.draft * draft_scale, model.overhead.copy(), cheap, model.row_group,
                    model.pass_ms * slope_scale, model.verify_fit, measurements=model.measurements,
                    provenance={**model.provenance, "perturbed": {"draft_scale": draft_scale,
                                                                  "verify_slope_scale": slope_scale}})
    problem = check_cost_model(out)
    if problem:
        raise CaddtreeError(f"perturbed cost model is invalid: {problem}")
    return out


def _decoder(method: str, target, drafter_for, cost_model_for):
    """-> (Decoder, drafter description) for one of our engine's methods."""
    from caddtree.engine import Decoder
    if method == "ar":
        return Decoder(target), None
    name, _, arg = method.partition(":")
    base, _, pert = name.partition("@")
    prefix, _, _ = base.rpartition("-")
    drafter = drafter_for(DRAFTER_PREFIX[prefix] if prefix else "auto")
    desc = getattr(drafter, "name", None) or type(drafter).__name__
    if base in TREE_METHODS:
        return Decoder(target, drafter, "ddtree", budget=int(arg)), desc
    cm = cost_model_for(drafter)
    if pert in PERTURB:
        cm = perturb_cost_model(cm, *PERTURB[pert])
    if pert in REFITS:
        from caddtree.costmodel import fit_cost_model
        cm = fit_cost_model({**cm.measurements, **REFITS[pert]}, cm.provenance)
    return Decoder(target, drafter, "caddtree", cost_model=cm, **VARIANTS.get(pert, {})), desc


# ------------------------------------------------------------------------------------------------------------ peers

def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, 1000 * (time.perf_counter() - t0)


def run_hf(target, ids: torch.Tensor, max_new_tokens: int, sampling, seed: int, lookup: bool = False) -> dict:
    """HF `generate` on the same model object; decode-only time = t(N tokens) - t(1 token)."""
    eos = sorted(target.eos_ids)
    kw = dict(attention_mask=torch.ones_like(ids[None]), eos_token_id=eos or None,
              pad_token_id=(eos[0] if eos else 0), do_sample=not sampling.greedy)
    if not sampling.greedy:
        kw.update(temperature=sampling.temperature, top_k=sampling.top_k or None, top_p=sampling.top_p)
    else:
        kw.update(temperature=None, top_k=None, top_p=None)
    if lookup:
        kw["prompt_lookup_num_tokens"] = 10
    with torch.inference_mode():
        torch.manual_seed(seed)
        _, t1 = _timed(lambda: target.model.generate(ids[None], max_new_tokens=1, **kw))
        torch.manual_seed(seed)
        out, tn = _timed(lambda: target.model.generate(ids[None], max_new_tokens=max_new_tokens, **kw))
    tokens = out[0, ids.shape[0]:].tolist()
    return {"tokens": tokens, "decode_ms": max(tn - t1, 0.0), "timed_tokens": max(len(tokens) - 1, 1),
            "prefill_ms": t1, "timing": "t(generate N) - t(generate 1), per N-1 tokens"}


class PeerCrashed(RuntimeError):
    """A peer's process died (e.g. a segfault in native code); its remaining runs are skipped."""


def _serve(conn, make_handler, args) -> None:
    """Child side of `PeerProcess`: build the handler, then answer requests until the parent goes away."""
    try:
        handle = make_handler(*args)
    except Exception as e:  # noqa: BLE001  reported to the parent as one line
        conn.send(("error", f"{type(e).__name__}: {e}"))
        return
    conn.send(("ready", None))
    while True:
        try:
            req = conn.recv()
        except EOFError:  # the parent closed its end
            return
        try:
            conn.send(("ok", handle(req)))
        except Exception as e:  # noqa: BLE001
            conn.send(("error", f"{type(e).__name__}: {e}"))


class PeerProcess:
    """`make_handler(*args)` built and called in a child process, so that a crash in a peer's native code (seen:
    llama.cpp built with -march=native on a CPU it mis-detects) ends that peer's runs with a one-line error instead of
    the whole benchmark. Timings are taken inside the handler, so the pipe adds nothing to them."""

    def __init__(self, make_handler, *args, name: str = "peer"):
        import multiprocessing as mp
        ctx = mp.get_context("spawn")  # a clean interpreter: no copy of the parent's torch threads or model
        self.name = name
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child, make_handler, args), daemon=True)
        self.proc.start()
        child.close()
        self._reply()  # "ready", or the handler's construction error

    def _reply(self):
        try:
            kind, value = self.conn.recv()
        except (EOFError, OSError):
            self.proc.join(10)
            code = self.proc.exitcode
            import signal
            why = f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit code {code}"
            raise PeerCrashed(f"{self.name} crashed ({why})") from None
        if kind == "error":
            raise RuntimeError(value)
        return value

    def __call__(self, request):
        try:
            self.conn.send(request)
        except (BrokenPipeError, OSError):
            pass  # the child is gone: _reply reports how it ended
        return self._reply()


class LlamaCppPeer:
    """llama-cpp-python on a GGUF file, greedy (top_k=1) or sampled with its own sampler; decode-only time from the
    token stream (llama-cpp-python keeps the prompt cache between calls, so the HF peer's t(N) - t(1) rule would
    subtract a prefill that the second call skips)."""

    def __init__(self, path: str, n_ctx: int, seed: int, threads: int):
        import llama_cpp
        self.llm = llama_cpp.Llama(model_path=path, n_ctx=n_ctx, seed=seed, verbose=False, n_threads=threads,
                                   logits_all=False)

    def __call__(self, request) -> dict:
        prompt, max_new_tokens, (temperature, top_k, top_p), eos = request
        self.llm.reset()
        out, stamps = [], []
        t0 = time.perf_counter()
        # llama.cpp's own defaults (min_p 0.05) would truncate the law our engine and HF sample from: switch them off
        for tok in self.llm.generate(prompt, top_k=1 if temperature == 0 else top_k, top_p=top_p, min_p=0.0,
                                     typical_p=1.0, repeat_penalty=1.0, temp=temperature, reset=True):
            stamps.append(time.perf_counter())  # token 1 comes after the prefill: time tokens 2..N from it
            out.append(int(tok))
            if len(out) >= max_new_tokens or tok in eos:
                break
        decode_ms = 1000 * (stamps[-1] - stamps[0]) if len(stamps) > 1 else 0.0
        return {"tokens": out, "decode_ms": decode_ms, "timed_tokens": max(len(out) - 1, 1),
                "prefill_ms": 1000 * (stamps[0] - t0),
                "timing": "streamed: time from token 1 to token N, per N-1 tokens"}


_LLAMA = {}  # (path, n_ctx, seed, threads) -> the peer, loaded once per run


def run_llamacpp(target, ids: torch.Tensor, max_new_tokens: int, sampling, seed: int, isolate: bool = True) -> dict:
    """The llama.cpp peer on the target's GGUF file; `isolate`: in its own process (`PeerProcess`)."""
    import llama_cpp  # noqa: F401  ImportError -> the caller records the skip
    from caddtree.target import _BUILTIN_GGUF, _builtin_gguf
    if target.name in _BUILTIN_GGUF:
        path = _builtin_gguf(target.name)
    elif str(target.name).endswith(".gguf"):
        path = Path(target.name)
    else:
        raise CaddtreeError(f"llamacpp needs a GGUF target, got {target.name}")
    key = (str(path), target.max_context, seed, torch.get_num_threads())
    if key not in _LLAMA:
        _LLAMA[key] = PeerProcess(LlamaCppPeer, *key, name="llama.cpp") if isolate else LlamaCppPeer(*key)
    law = (0.0 if sampling.greedy else sampling.temperature, sampling.top_k, sampling.top_p)
    request = (ids.tolist(), max_new_tokens, law, set(target.eos_ids))
    try:
        return _LLAMA[key](request)
    except PeerCrashed as e:
        raise PeerCrashed(f"{e}; a llama-cpp-python built for this CPU (-march=native) can crash like this: "
                          f"rebuild it with CMAKE_ARGS=\"-DGGML_NATIVE=OFF\" pip install --no-cache-dir "
                          f"--force-reinstall --no-deps llama-cpp-python") from None


# -------------------------------------------------------------------------------------------------------- the runs

def config_key(target_name: str, max_new_tokens: int, sampling, turns: int, seed: int) -> str:
    return (f"target={target_name}|T={sampling.temperature}|top_k={sampling.top_k}|top_p={sampling.top_p}"
            f"|max_new={max_new_tokens}|turns={turns}|seed={seed}")


def record_key(r: dict) -> tuple:
    return (r["dataset"], r["method"], str(r["prompt_id"]), r["config"])


def load_records(path) -> list[dict]:
    """Records of one file, or of every records*.jsonl in a directory (the parts of a split run)."""
    path = Path(path)
    if path.is_dir():
        return [r for p in sorted(path.glob("records*.jsonl")) for r in load_records(p)]
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut by a kill mid-write: that prompt is simply redone
            pass
    return out


def identical_to_plain(records: list[dict], plain_run) -> int:
    """How many of `records` (a run without `ar`) have the same output tokens as plain decoding of the same prompt
    and settings in the run directory `plain_run`. Raises KeyError where that run lacks a prompt."""
    config = records[0]["config"]
    plain = {(r["dataset"], r["prompt_id"]): r["tokens"] for r in load_records(plain_run)
             if r["method"] == "ar" and r["config"] == config}
    return sum(r["tokens"] == plain[(r["dataset"], r["prompt_id"])] for r in records)


def _second_turn_ids(target, item: dict, max_new_tokens: int):
    """MT-Bench turn 2: [turn 1, the model's own greedy answer to it, turn 2] through the chat template."""
    from caddtree.engine import Decoder
    tok = target.tokenizer
    first = Decoder(target).generate(target.chat_ids(item["turns"][0]), max_new_tokens).tokens
    answer = tok.decode(first, skip_special_tokens=True)
    msgs = [{"role": "user", "content": item["turns"][0]}, {"role": "assistant", "content": answer},
            {"role": "user", "content": item["turns"][1]}]
    return target.messages_ids(msgs)


def run_bench(target, drafter_for, cost_model_for, prompts: dict, methods: list[str], out_dir, max_new_tokens: int,
              sampling, seed: int = 0, turns: int = 1, encode=None, progress: bool = True,
              part: tuple[int, int] = (1, 1), repeats: int = 1) -> list[dict]:
    """Run every (dataset, prompt, method) not yet recorded in out_dir; returns all records of this config.

    target: a loaded Target; drafter_for('auto' (= --drafter) or a --drafter spec) -> Drafter;
    cost_model_for(drafter) -> CostModel; prompts: {dataset: [{id, prompt[, turns]}]}; encode(text) -> prompt ids
    (default target.chat_ids);
    part (I, K): this process takes prompts I-1, I-1+K, ... of the round-robin order.
    repeats R: each prompt's methods run R times, the order reversed each time, and a method's record is its fastest
    run (`ms_per_token_runs` lists all; `match_ar` holds only if every run matched, `runs_identical` if every run gave
    the same tokens). On a shared machine a burst of load can slow one run of a prompt by 30%; the fastest of R runs
    of every method is the steadier comparison.
    """
    if repeats < 1:
        raise CaddtreeError(f"--repeats must be >= 1, got {repeats}")
    from tqdm import tqdm
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    i_part, k_parts = part
    path = out_dir / ("records.jsonl" if k_parts == 1 else f"records.part{i_part}of{k_parts}.jsonl")
    config = config_key(target.name, max_new_tokens, sampling, turns, seed)
    old = [r for r in load_records(out_dir) if r.get("config") == config]
    done = {record_key(r) for r in old}
    refs = {(r["dataset"], r["prompt_id"]): r["tokens"] for r in old if r["method"] == "ar" and "tokens" in r}
    encode = encode or target.chat_ids
    methods = sorted(methods, key=lambda m: m != "ar")  # `ar` first: its tokens are the exact-match reference
    rounds = max((len(items) for items in prompts.values()), default=0)
    order = [(ds, items[i]) for i in range(rounds) for ds, items in prompts.items() if i < len(items)]
    todo = [(j // k_parts, ds, item) for j, (ds, item) in enumerate(order) if j % k_parts == i_part - 1
            and any((ds, m, str(item["id"]), config) not in done for m in methods)]
    total = repeats * sum(1 for _, ds, item in todo for m in methods if (ds, m, str(item["id"]), config) not in done)

    def method_order(j: int) -> list[str]:
        """`ar` first, then the other methods forward on this part's even prompts and backward on its odd ones, so no
        method always runs right after the same other one (the machine's state drifts within a prompt's runs)."""
        head = [m for m in methods if m == "ar"]
        rest = [m for m in methods if m != "ar"]
        return head + (rest if j % 2 == 0 else rest[::-1])

    # drafters, cost models (profiled on first use) and decoders are built once, before the timed runs
    drafters, costs = {}, {}

    def drafter_cached(kind):
        if kind not in drafters:
            drafters[kind] = drafter_for(kind)
        return drafters[kind]

    def cost_cached(drafter):
        if id(drafter) not in costs:
            costs[id(drafter)] = cost_model_for(drafter)
        return costs[id(drafter)]

    decoders = {m: _decoder(m, target, drafter_cached, cost_cached) for m in methods if m not in PEERS} if todo else {}
    if todo:  # warm-up (untimed): first calls pay for allocation and kernel selection
        ids = encode(todo[0][2]["prompt"])
        for m, (dec, _) in decoders.items():
            dec.generate(ids, 4, sampling, seed=seed)
    skipped, skip_recs = {}, []
    bar = tqdm(total=total, desc="bench", unit="run", file=sys.stderr, disable=not progress, dynamic_ncols=True)
    with open(path, "a") as f:
        for j, ds, item in todo:
            pid = str(item["id"])
            if turns == 2 and len(item.get("turns") or []) > 1:
                ids = _second_turn_ids(target, item, max_new_tokens)
            else:
                ids = encode(item["prompt"])
            best, final = {}, set()  # method -> its fastest run so far; methods skipped or failed on this prompt
            for r, m in ((r, m) for r in range(repeats) for m in method_order(j + r)):
                if (ds, m, pid, config) in done or m in final:
                    continue
                bar.set_postfix_str(f"{ds} #{pid} {m}" + (f" ({r + 1}/{repeats})" if repeats > 1 else ""))
                rec = {"dataset": ds, "method": m, "prompt_id": pid, "config": config, "prompt_len": len(ids),
                       "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
                if m in skipped:
                    rec["skipped"] = skipped[m]
                else:
                    try:
                        rec.update(_run_one(m, target, ids, max_new_tokens, sampling, seed, decoders.get(m)))
                    except (ImportError, PeerCrashed) as e:  # optional peer not installed, or its process died
                        skipped[m] = f"not installed ({e})" if isinstance(e, ImportError) else str(e)
                        print(f"bench: skipping {m}: {skipped[m]}", file=sys.stderr)
                        rec["skipped"] = skipped[m]
                    except CaddtreeError as e:  # e.g. prompt + max_new_tokens past the context window
                        rec["error"] = str(e)
                    except Exception as e:  # noqa: BLE001  a peer's own failure must not end a long run
                        if m not in PEERS:
                            raise
                        rec["error"] = f"{type(e).__name__}: {e}"
                if m == "ar" and "tokens" in rec and (ds, pid) not in refs:
                    refs[(ds, pid)] = rec["tokens"]
                if "tokens" in rec:
                    ref = refs.get((ds, pid))
                    rec["match_ar"] = None if (ref is None or not sampling.greedy) else rec["tokens"] == ref
                    if rec["match_ar"] is False:
                        n = min(len(ref), len(rec["tokens"]))
                        rec["first_mismatch"] = next((i for i in range(n) if ref[i] != rec["tokens"][i]), n)
                bar.update(1 if "ms_per_token" in rec else repeats - r)  # a failed method is not run again
                if "skipped" in rec:  # not written: a rerun with the peer installed fills it in
                    skip_recs.append(rec)
                    final.add(m)
                    continue
                if "ms_per_token" not in rec:  # an error: recorded once (or the runs before it, if any)
                    final.add(m)
                    rec = best.get(m, rec)
                elif m in best:  # a repeat: keep the fastest run, every run's time, and whether all matched
                    old, run = best[m], rec
                    rec = {**(run if run["ms_per_token"] < old["ms_per_token"] else old),
                           "ms_per_token_runs": old["ms_per_token_runs"] + [run["ms_per_token"]],
                           "match_ar": None if old.get("match_ar") is None else old["match_ar"] and run["match_ar"],
                           "runs_identical": old["runs_identical"] and run.get("tokens") == old.get("tokens")}
                    rec.pop("first_mismatch", None)
                    mismatch = [x["first_mismatch"] for x in (old, run) if "first_mismatch" in x]
                    if mismatch:
                        rec["first_mismatch"] = min(mismatch)
                elif repeats > 1:  # runs_identical: every run gave the same tokens (checkable without `ar`)
                    rec["ms_per_token_runs"], rec["runs_identical"] = [rec["ms_per_token"]], True
                best[m] = rec
                if r == repeats - 1 or m in final:  # the record is complete: write it now
                    f.write(json.dumps(rec) + "\n")
                    f.flush()
                    done.add((ds, m, pid, config))
    bar.close()
    return [r for r in load_records(out_dir) if r.get("config") == config] + skip_recs  # every part


def _run_one(m, target, ids, max_new_tokens, sampling, seed, decoder) -> dict:
    if m in ("hf", "hf-lookup", "llamacpp"):
        r = (run_llamacpp(target, ids, max_new_tokens, sampling, seed) if m == "llamacpp" else
             run_hf(target, ids, max_new_tokens, sampling, seed, lookup=m == "hf-lookup"))
        ms = r["decode_ms"] / r["timed_tokens"]
        return {"tokens": r["tokens"], "new_tokens": len(r["tokens"]), "ms_per_token": ms,
                "tokens_per_s": 1000 / max(ms, 1e-9), "prefill_ms": r["prefill_ms"], "timing": r["timing"]}
    dec, drafter = decoder
    res = dec.generate(ids, max_new_tokens, sampling, seed=seed)
    s = res.summary()
    rec = {k: s[k] for k in ("new_tokens", "rounds", "ms_per_token", "tokens_per_s", "tau", "prefill_ms",
                             "tree_size_mean", "tree_size_std", "stop_reason")}
    rec.update(tokens=res.tokens, drafter=drafter, budget=dec.budget if m != "ar" else 0,
               tree_sizes=[r.tree_size for r in res.rounds], accepted=[r.accepted for r in res.rounds],
               predicted_phi=[None if r.predicted_phi is None else round(r.predicted_phi, 3) for r in res.rounds],
               decode_ms=res.decode_ms, draft_ms=sum(r.draft_ms for r in res.rounds),
               verify_ms=sum(r.verify_ms for r in res.rounds),
               verify_ms_rounds=[round(r.verify_ms, 2) for r in res.rounds],  # the cost model checked size by size
               overhead_ms=sum(r.build_ms + r.compact_ms for r in res.rounds),
               build_ms=sum(r.build_ms for r in res.rounds),  # tree build + budget choice: the policy's own cost
               second_stage_rounds=None if dec.gate is None else sum(bool(r.second_stage) for r in res.rounds))
    if dec.gate is not None:  # per round, so the cost model can price each round's draft (`priced_ms_per_token`)
        rec["second_stage"] = [int(bool(r.second_stage)) for r in res.rounds]
    return rec


def priced_ms_per_token(r: dict, cost) -> float | None:
    """A record's decode ms/token priced by the cost model instead of the clock: each round at C_d (the first
    stage's where the draft gate skipped the costly one), overhead and C_v(n; ℓ), ℓ rebuilt from the accepted
    tokens; `ar` at C_v(0; ℓ) alone. What the policy chose, priced as CaDDTree itself prices it, free of the
    machine's timing noise. Records from before the per-round `second_stage` list price every round's draft at
    the run's share of costly rounds. None where there is nothing to price (peers, trees past the profile)."""
    sizes, acc = r.get("tree_sizes"), r.get("accepted")
    if cost is None or not sizes or acc is None or max(sizes) > cost.max_nodes:
        return None
    speculative = r["method"] != "ar"
    full = r.get("second_stage")
    if full is None:
        share = 1.0 if r.get("second_stage_rounds") is None else r["second_stage_rounds"] / len(sizes)
        full = [share] * len(sizes)
    ctx, total = r["prompt_len"] - 1, 0.0
    for n, a, f in zip(sizes, acc, full):
        total += cost.verify_ms(n, ctx)
        if speculative:
            total += cost.overhead_ms(ctx) + f * cost.draft_ms(ctx) + (1 - f) * cost.cheap_draft_ms(ctx)
        ctx += a + 1
    return total / r["new_tokens"]


# ---------------------------------------------------------------------------------------------------------- summary

def _family(method: str):
    """'ddtree:16' -> ('ddtree', 16); 'lookup-ddtree:8' -> ('lookup-ddtree', 8); others -> (method, None)."""
    name, _, arg = method.partition(":")
    return (name, int(arg)) if arg.isdigit() else (method, None)


OTHER_MEASURES = ("pooled", "priced")  # besides medians, CaDDTree against the fixed budget best by each (summary)


def summarize(records: list[dict], price=None) -> dict:
    """records -> {"rows": [per dataset x method], "oracle": [per dataset x fixed-budget family]}.

    price(record) -> ms/token or None, optional (`priced_ms_per_token` with the run's cost model): each row then
    also has the median priced ms/token, and each oracle row CaDDTree's ratio to the best fixed budget by that
    price (the policy's choices compared without the clock's noise)."""
    ok = [r for r in records if "ms_per_token" in r and not r.get("error") and not r.get("skipped")]
    datasets = list(dict.fromkeys(r["dataset"] for r in records))
    methods = list(dict.fromkeys(r["method"] for r in records))
    rows = []
    for ds in datasets:
        groups = {m: [r for r in ok if r["dataset"] == ds and r["method"] == m] for m in methods}
        med = {m: statistics.median(r["ms_per_token"] for r in rs) for m, rs in groups.items() if rs}
        for m in methods:
            rs = groups[m]
            allr = [r for r in records if r["dataset"] == ds and r["method"] == m]
            if not rs:
                reason = next((r.get("skipped") or r.get("error") for r in allr), None)
                if allr:
                    rows.append({"dataset": ds, "method": m, "n": 0, "note": reason or "no result"})
                continue
            sizes = [s for r in rs for s in r.get("tree_sizes", [])]
            rounds = sum(r.get("rounds", 0) for r in rs)
            matched = [r["match_ar"] for r in rs if r.get("match_ar") is not None]
            priced = [(f, a) for r in rs for f, a in zip(r.get("predicted_phi") or [], r.get("accepted", []))
                      if f is not None]
            prices = [price(r) for r in rs] if price is not None else []
            tokens = sum(r["new_tokens"] for r in rs)
            rows.append({
                "dataset": ds, "method": m, "n": len(rs), "ms_per_token": med[m],
                # the whole set's decode time over its tokens: a throughput, not a typical prompt's time
                "pooled_ms_per_token": (sum(r["decode_ms"] for r in rs) / tokens
                                        if tokens and all("decode_ms" in r for r in rs) else None),
                "priced_ms_per_token": (statistics.median(prices) if prices and None not in prices else None),
                "speedup": med["ar"] / med[m] if "ar" in med else None,
                "tau": sum(r["new_tokens"] for r in rs) / rounds if rounds else None,
                "tree_size_mean": float(np.mean(sizes)) if sizes else None,
                "tree_size_std": float(np.std(sizes)) if sizes else None,
                "match": sum(matched), "compared": len(matched),
                "second_stage_share": (sum(r["second_stage_rounds"] for r in rs) / rounds
                                       if rounds and all(r.get("second_stage_rounds") is not None for r in rs)
                                       else None),
                # CaDDTree: Φ it expected per round against the draft tokens accepted (is the drafter calibrated?)
                "phi_predicted": float(np.mean([f for f, _ in priced])) if priced else None,
                "phi_accepted": float(np.mean([a for _, a in priced])) if priced else None,
                "drafter": next((r.get("drafter") for r in rs if r.get("drafter")), None), "note": ""})
    oracle = []
    by = {(r["dataset"], r["method"]): r for r in rows if r["n"]}
    for ds in datasets:
        for fam, ours in zip(TREE_METHODS, COST_METHODS):
            fixed = [(by[k]["ms_per_token"], _family(k[1])[1], k[1]) for k in by
                     if k[0] == ds and _family(k[1])[0] == fam]
            if not fixed:
                continue
            best_ms, best_b, best_method = min(fixed)
            by_measure = {}  # measure -> (ms/token, B) of the fixed budget best by it, if every budget has it
            for measure in OTHER_MEASURES:
                vals = [(by[(ds, m)][f"{measure}_ms_per_token"], b) for _, b, m in fixed]
                by_measure[measure] = min(vals) if all(v is not None for v, _ in vals) else (None, None)
            variants = [m for m in methods if (ds, m) in by and m.partition("@")[0] == ours] or [ours]  # @cd2, ...
            for m in variants:
                o = {"dataset": ds, "family": fam, "oracle_budget": best_b, "oracle_ms_per_token": best_ms,
                     "method": m, "ms_per_token": None, "ratio": None}
                for measure, (ms, b) in by_measure.items():
                    mine = by[(ds, m)][f"{measure}_ms_per_token"] if (ds, m) in by else None
                    o[f"{measure}_oracle_budget"] = b
                    o[f"{measure}_ratio"] = mine / ms if ms is not None and mine is not None else None
                if (ds, m) in by:
                    o["ms_per_token"] = by[(ds, m)]["ms_per_token"]
                    o["ratio"] = o["ms_per_token"] / best_ms  # <= 1: CaDDTree at least as fast as the oracle budget
                    o.update(paired_ratio(ok, ds, m, best_method))
                oracle.append(o)
    return {"rows": rows, "oracle": oracle}


def paired_ratio(records: list[dict], dataset: str, method: str, other: str, confidence: float = 0.9) -> dict:
    """ms/token of `method` over `other` prompt by prompt (both ran back to back on each prompt): the median ratio,
    a bootstrap confidence interval of that median, and on how many prompts `method` was faster.

    The ratio of the two medians compares different prompts' times; on a noisy shared CPU the per-prompt ratio,
    whose prompt-to-prompt variation cancels, shows whether a difference is larger than the noise."""
    from scipy.stats import bootstrap
    ms = {}
    for r in records:
        if r["dataset"] == dataset and r["method"] in (method, other):
            ms.setdefault(str(r["prompt_id"]), {})[r["method"]] = r["ms_per_token"]
    ratios = np.array([v[method] / v[other] for v in ms.values() if method in v and other in v])
    out = {"paired_n": len(ratios), "paired_ratio": float(np.median(ratios)) if len(ratios) else None,
           "paired_faster": int((ratios < 1).sum()), "paired_ci": None}
    if len(ratios) >= 3 and np.ptp(ratios) > 0:
        ci = bootstrap((ratios,), np.median, confidence_level=confidence, n_resamples=2000, method="percentile",
                       rng=np.random.default_rng(0)).confidence_interval
        out["paired_ci"] = (float(ci.low), float(ci.high))
    return out


def _f(v, fmt="{:.2f}"):
    return "–" if v is None else fmt.format(v)


def write_summary(summary: dict, out_dir, header: str = "") -> str:
    """summary.md + summary.csv in out_dir; returns the Markdown."""
    out_dir = Path(out_dir)
    rows, oracle = summary["rows"], summary["oracle"]
    priced = any(r.get("priced_ms_per_token") is not None for r in rows)  # a column only where a profile priced
    md = [header, "| dataset | method | n | ms/token (median) | speed-up vs ar | τ | tree size mean ± std | "
                  "exact match vs ar |" + (" priced ms/token |" if priced else ""),
          "|---|---|---:|---:|---:|---:|---:|---:|" + ("---:|" if priced else "")]
    for r in rows:
        if not r["n"]:
            md.append(f"| {r['dataset']} | {r['method']} | 0 | – | – | – | – | {r['note']} |"
                      + (" – |" if priced else ""))
            continue
        ts = "–" if r["tree_size_mean"] is None else f"{r['tree_size_mean']:.1f} ± {r['tree_size_std']:.1f}"
        if r.get("second_stage_share") is not None:  # two-stage drafter under the draft gate
            ts += f" (stage 2 in {100 * r['second_stage_share']:.0f}% of rounds)"
        if r.get("phi_predicted") is not None:
            ts += f"; Φ {r['phi_predicted']:.2f} expected, {r['phi_accepted']:.2f} accepted"
        match = f"{r['match']}/{r['compared']}" if r["compared"] else "–"
        md.append(f"| {r['dataset']} | {r['method']} | {r['n']} | {r['ms_per_token']:.2f} | "
                  f"{_f(r['speedup'], '{:.2f}x')} | {_f(r['tau'])} | {ts} | {match} |"
                  + (f" {_f(r.get('priced_ms_per_token'))} |" if priced else ""))
    if oracle:
        pooled = any(o.get("pooled_ratio") is not None for o in oracle)
        md += ["", "Oracle fixed budget per dataset (best `ddtree:B` of this run, chosen after the runs) and "
                   "CaDDTree's ms/token ratio to it (< 1: CaDDTree faster): the ratio of the two medians, and the "
                   "median of the per-prompt ratios (the two ran back to back on each prompt) with its 90% bootstrap "
                   "interval and the prompts on which CaDDTree was faster."
               + (" Pooled: the set's total decode time over its total tokens (its throughput: long answers weigh "
                  "more), CaDDTree over the fixed budget best by that measure (its B in brackets)." if pooled else "")
               + (" Priced: the same records priced by the run's cost model instead of the clock "
                  "(`bench.priced_ms_per_token`), CaDDTree over the best fixed budget by that price (its B in "
                  "brackets): the policy's choices without the machine's timing noise." if priced else ""), "",
               "| dataset | family | oracle B | oracle ms/token | method | ms/token | ratio "
               "| per-prompt ratio [90% CI] | CaDDTree faster |" + (" pooled ratio |" if pooled else "")
               + (" priced ratio |" if priced else ""),
               "|---|---|---:|---:|---|---:|---:|---:|---:|" + "---:|" * (pooled + priced)]
        for o in oracle:
            paired = _f(o.get("paired_ratio"), "{:.3f}")
            if o.get("paired_ci"):
                paired += " [{:.2f}, {:.2f}]".format(*o["paired_ci"])
            faster = f"{o['paired_faster']}/{o['paired_n']}" if o.get("paired_n") else "–"
            other = "".join(" – |" if o.get(f"{k}_ratio") is None else
                            f" {o[f'{k}_ratio']:.3f} (B={o[f'{k}_oracle_budget']}) |"
                            for k, shown in zip(OTHER_MEASURES, (pooled, priced)) if shown)
            md.append(f"| {o['dataset']} | {o['family']} | {o['oracle_budget']} | {o['oracle_ms_per_token']:.2f} | "
                      f"{o['method']} | {_f(o['ms_per_token'])} | {_f(o['ratio'], '{:.3f}')} | {paired} | {faster} |"
                      + other)
    bad = [r for r in rows if r["n"] and r["compared"] and r["match"] < r["compared"]]
    if bad:
        md += ["", "Exact-match failures vs `ar` (greedy): " + ", ".join(
            f"{r['dataset']}/{r['method']} {r['compared'] - r['match']}" for r in bad)
               + " (peers hf/llamacpp are not expected to be bit-exact)."]
    text = "\n".join(md) + "\n"
    (out_dir / "summary.md").write_text(text)
    keys = ["dataset", "method", "n", "ms_per_token", "speedup", "tau", "tree_size_mean", "tree_size_std", "match",
            "compared", "drafter", "second_stage_share", "phi_predicted", "phi_accepted", "pooled_ms_per_token",
            "priced_ms_per_token", "note"]
    with open(out_dir / "summary.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys + ["oracle_budget", "oracle_ms_per_token", "ratio_to_oracle",
                                                 "paired_ratio_to_oracle", "paired_ci_low", "paired_ci_high",
                                                 "pooled_oracle_budget", "pooled_ratio_to_oracle",
                                                 "priced_oracle_budget", "priced_ratio_to_oracle"],
                           extrasaction="ignore")
        w.writeheader()
        for r in rows:
            o = next((o for o in oracle if o["dataset"] == r["dataset"] and o["method"] == r["method"]), {})
            ci = o.get("paired_ci") or (None, None)
            w.writerow({**r, "oracle_budget": o.get("oracle_budget"),
                        "oracle_ms_per_token": o.get("oracle_ms_per_token"), "ratio_to_oracle": o.get("ratio"),
                        "paired_ratio_to_oracle": o.get("paired_ratio"), "paired_ci_low": ci[0],
                        "paired_ci_high": ci[1], "pooled_oracle_budget": o.get("pooled_oracle_budget"),
                        "pooled_ratio_to_oracle": o.get("pooled_ratio"),
                        "priced_oracle_budget": o.get("priced_oracle_budget"),
                        "priced_ratio_to_oracle": o.get("priced_ratio")})
    return text


def write_plots(records: list[dict], summary: dict, out_dir) -> list[Path]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    out_dir = Path(out_dir)
    rows = [r for r in summary["rows"] if r["n"]]
    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    methods = [m for m in dict.fromkeys(r["method"] for r in rows) if m != "ar"]
    paths = []
    if not datasets:
        return paths
    # 1. speed-up by dataset and method
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(datasets) * max(1, len(methods)) / 3), 4))
    w = 0.8 / max(len(methods), 1)
    for j, m in enumerate(methods):
        ys = [next((r["speedup"] or 0 for r in rows if r["dataset"] == d and r["method"] == m), 0) for d in datasets]
        ax.bar(np.arange(len(datasets)) + j * w, ys, w, label=m)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(np.arange(len(datasets)) + w * (len(methods) - 1) / 2, datasets, rotation=20)
    ax.set(ylabel="speed-up vs ar (median ms/token)", title="speed-up by dataset and method")
    ax.legend(fontsize=7, ncol=2)
    paths.append(_save(fig, out_dir / "speedup.png"))
    # 2. CaDDTree's chosen tree size per round, per dataset
    ok = [r for r in records if r.get("method") == "caddtree" and r.get("tree_sizes")]
    if ok:
        ds = [d for d in datasets if any(r["dataset"] == d for r in ok)]
        cols = min(4, len(ds))
        nrows = (len(ds) + cols - 1) // cols
        fig, axes = plt.subplots(nrows, cols, figsize=(3.2 * cols, 2.6 * nrows), squeeze=False)
        for a, d in zip(axes.flat, ds):
            sizes = [s for r in ok if r["dataset"] == d for s in r["tree_sizes"]]
            a.hist(sizes, bins=np.linspace(-0.5, max(sizes) + 0.5, min(30, max(sizes) + 1) + 1), color="C2")
            a.set(title=f"{d} (mean {np.mean(sizes):.1f})", xlabel="tree size n")
        for a in list(axes.flat)[len(ds):]:
            a.axis("off")
        fig.suptitle("CaDDTree budget per round")
        paths.append(_save(fig, out_dir / "caddtree_budget_hist.png"))
    # 3. τ and ms/token against the fixed budget, CaDDTree marked at its mean tree size
    fixed = [r for r in rows if _family(r["method"])[0] == "ddtree"]
    if fixed:
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
        for k, d in enumerate(datasets):
            pts = sorted((_family(r["method"])[1], r["tau"], r["ms_per_token"]) for r in fixed if r["dataset"] == d)
            if not pts:
                continue
            b, tau, ms = zip(*pts)
            a1.plot(b, tau, "o-", color=f"C{k}", label=d)
            a2.plot(b, ms, "o-", color=f"C{k}", label=d)
            c = next((r for r in rows if r["dataset"] == d and r["method"] == "caddtree"), None)
            if c and c["tree_size_mean"] and c["tau"]:
                a1.plot(c["tree_size_mean"], c["tau"], "*", color=f"C{k}", ms=14, mec="k")
                a2.plot(c["tree_size_mean"], c["ms_per_token"], "*", color=f"C{k}", ms=14, mec="k")
        for a, yl in ((a1, "τ (tokens per round)"), (a2, "ms/token (median)")):
            a.set_xscale("log", base=2)
            a.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _: f"{x:g}"))
            a.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            a.set(xlabel="fixed tree budget B (★ = CaDDTree at its mean tree size)", ylabel=yl)
            a.grid(alpha=0.3)
        a1.legend(fontsize=7)
        paths.append(_save(fig, out_dir / "budget_sweep.png"))
    return paths


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt
    plt.close(fig)
    return path


# -------------------------------------------------------------------------------------------------------------- CLI

def machine_info() -> dict:
    import transformers

    from caddtree.kernels import kernel_version, packing_available
    from caddtree.profile import _cpu_name
    return {"cpu": _cpu_name(), "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "cpu_kernel": kernel_version() if packing_available() else "pytorch",
            "torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(), "platform": platform.platform()}


def add_bench_parser(sub) -> None:
    from caddtree.cli import add_model_args
    b = sub.add_parser("bench", help="benchmark every method on the paper's datasets (records, summary, plots)")
    add_model_args(b)
    b.add_argument("--datasets", default=ALL_DATASETS, help=f"comma list (default: {ALL_DATASETS})")
    b.add_argument("--methods", default=None,
                   help=f"comma list; bare numbers extend the last budget: {DEFAULT_METHODS} (default), "
                        "also ddtree:B / caddtree with a drafter prefix lookup-, dflash-, mix- (e.g. mix-caddtree), "
                        "hf, hf-lookup, llamacpp")
    b.add_argument("--num-prompts", type=int, default=None, help="first N prompts per dataset (default 10)")
    b.add_argument("--first-prompt", type=int, default=0, metavar="K",
                   help="start at each dataset's K-th prompt (0-based), e.g. to check a change on prompts that "
                        "another run did not use")
    b.add_argument("--max-new-tokens", type=int, default=None, help="default 256")
    b.add_argument("--temperature", type=float, default=0.0)
    b.add_argument("--top-k", type=int, default=0)
    b.add_argument("--top-p", type=float, default=1.0)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--turns", type=int, default=1, choices=[1, 2], help="MT-Bench: 2 = answer the second turn")
    b.add_argument("--out", required=True, help="output dir (a rerun with the same dir resumes)")
    b.add_argument("--data-dir", default=None, help="benchmark data dir (default: $CADDTREE_DATA or ../shared/data)")
    b.add_argument("--cost-model", default=None, help="an existing cost profile JSON, e.g. from `caddtree profile "
                                                      "--out` (default: the per-user cache)")
    b.add_argument("--quick", action="store_true",
                   help="smoke run: 1 prompt per dataset, 16 new tokens, methods ar,ddtree:4,caddtree")
    b.add_argument("--part", default="1/1", metavar="I/K",
                   help="run only every K-th prompt from the I-th (K processes, e.g. one per core with --threads 1; "
                        "then the same command with --report instead of --part for the combined summary)")
    b.add_argument("--repeats", type=int, default=1, metavar="R",
                   help="run each prompt's methods R times (order reversed each time) and keep each method's fastest "
                        "run: steadier comparisons on a shared machine, R times the run time")
    b.add_argument("--report", action="store_true",
                   help="run nothing: write the summary and plots from the records already in --out")
    b.add_argument("--perturb", action="store_true",
                   help="also CaDDTree with its cost model perturbed (C_d, C_v slope x0.5 / x2)")
    b.set_defaults(func=cmd_bench)


def _parse_part(text: str) -> tuple[int, int]:
    try:
        i, k = (int(x) for x in text.split("/"))
    except ValueError:
        i = k = 0
    if not 1 <= i <= k:
        raise CaddtreeError(f"--part must be I/K with 1 <= I <= K (e.g. 1/2), got '{text}'")
    return i, k


def saved_cost_models(out: Path, default_drafter) -> dict:
    """The cost models a run saved beside its records, by drafter class name: `cost_model_<Drafter>.json`, and
    `cost_model.json` for the run's default drafter (`default_drafter()` loads it) if it was profiled for that
    drafter (its C_d is the drafter's own)."""
    from caddtree.costmodel import load_cost_model
    from caddtree.profile import drafter_id
    found = {}
    for path in sorted(out.glob("cost_model*.json")):
        cm = load_cost_model(path)
        if path.stem != "cost_model":
            found[path.stem[len("cost_model_"):]] = cm
        elif cm.provenance.get("drafter_id") == drafter_id(drafter := default_drafter()):
            found[type(drafter).__name__] = cm
    return found


def cmd_bench(args) -> None:
    from caddtree.accept import SamplingParams
    from caddtree.cli import check_cost_model_arg, check_out_path, load_drafter_spec, setup_torch
    from caddtree.costmodel import plot_cost_model, save_cost_model
    from caddtree.datasets import load_prompts
    from caddtree.profile import ensure_cost_model
    from caddtree.target import load_target

    check_cost_model_arg(args.cost_model)
    check_out_path(args.out, "--out", directory=True)
    for flag, value in (("--num-prompts", args.num_prompts), ("--max-new-tokens", args.max_new_tokens)):
        if value is not None and value < 1:  # 0 would otherwise read as "not given" and run the default size
            raise CaddtreeError(f"{flag} must be >= 1, got {value}")
    start = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    q = QUICK if args.quick else dict(num_prompts=10, max_new_tokens=256, methods=DEFAULT_METHODS)
    num = args.num_prompts or q["num_prompts"]
    max_new = args.max_new_tokens or q["max_new_tokens"]
    methods = parse_methods(args.methods or q["methods"])
    if args.perturb:
        methods += [f"caddtree@{p}" for p in PERTURB if f"caddtree@{p}" not in methods]
    sampling = SamplingParams(args.temperature, args.top_k, args.top_p)
    part = _parse_part(args.part)
    names = [d.strip() for d in args.datasets.split(",") if d.strip()]
    if not names:
        raise CaddtreeError(f"--datasets names no dataset: give some of {ALL_DATASETS}")
    if args.first_prompt < 0:
        raise CaddtreeError(f"--first-prompt must be >= 0, got {args.first_prompt}")
    if args.repeats < 1:
        raise CaddtreeError(f"--repeats must be >= 1, got {args.repeats}")
    first = args.first_prompt
    if args.report and not list(Path(args.out).glob("records*.jsonl")):
        raise CaddtreeError(f"--report: {args.out} holds no bench records: run the command without --report first")
    # fail fast, before loading models
    prompts = {d: load_prompts(d, first + num, data_dir=args.data_dir)[first:] for d in names}
    empty = [d for d in names if not prompts[d]]
    if empty:
        raise CaddtreeError(f"--first-prompt {first} is past the last prompt of {', '.join(empty)}: lower it")
    setup_torch(args)
    target = load_target(args.target, device=args.device)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cms = {}  # drafter class name -> the cost model the run used

    def cost_model_for(drafter):
        cm = ensure_cost_model(target, drafter, path=args.cost_model)
        cms[type(drafter).__name__] = cm
        return cm

    print(f"bench: {target.name} | {len(names)} datasets x {num} prompts x {len(methods)} methods | "
          f"{max_new} new tokens | T={args.temperature} | out {out}", file=sys.stderr)
    if args.report:  # no runs: summarise what the records hold (a split run's parts, an interrupted run)
        config = config_key(target.name, max_new, sampling, args.turns, args.seed)
        asked = {(d, str(x["id"])) for d in names for x in prompts[d]}
        records = [r for r in load_records(out) if r.get("config") == config and r["method"] in methods
                   and (r["dataset"], r["prompt_id"]) in asked]
        have = {}
        for r in records:
            have.setdefault((r["dataset"], r["prompt_id"]), set()).add(r["method"])
        # only prompts every method finished: medians and speed-ups then compare the same prompts
        records = [r for r in records if have[(r["dataset"], r["prompt_id"])] >= set(methods)]
        if not records:
            raise CaddtreeError(f"--report: no prompt in {out} has finished every method with these options (datasets, "
                                f"--methods, prompts, --max-new-tokens, sampling, --seed): run them without --report")
    else:
        records = run_bench(target, lambda kind: load_drafter_spec(args.drafter if kind == "auto" else kind, target),
                            cost_model_for, prompts, methods, out, max_new, sampling, seed=args.seed,
                            turns=args.turns, part=part, repeats=args.repeats)
    records = [r for r in records if r["dataset"] in names and r["method"] in methods]
    drafters = sorted({r["drafter"] for r in records if r.get("drafter")})
    repeats = max((len(r.get("ms_per_token_runs", [0])) for r in records), default=1)  # --report: from the records
    header = (f"# caddtree bench\n\ntarget `{target.name}`, drafter(s) {', '.join(drafters) or '–'}, "
              f"{num} prompts per dataset{f' from prompt {first}' if first else ''}, {max_new} new tokens, "
              f"temperature {args.temperature}, "
              f"{torch.get_num_threads()} torch threads. ms/token = decode time per output token, prefill excluded"
              f"{f', the fastest of {repeats} runs per prompt and method' if repeats > 1 else ''} "
              f"(HF peers: t(N tokens) - t(1 token) over N - 1; llama.cpp: its token stream, token 1 to N); "
              f"speed-up = median ms/token of `ar` / the method's.\n")
    # all resumed, or --report: keep the profiles the run saved; only a directory without one gets the cached profile
    if not cms and not (out / "cost_model.json").is_file() and any("caddtree" in m for m in methods):
        cost_model_for(load_drafter_spec(args.drafter, target))
    pricing = cms or saved_cost_models(out, lambda: load_drafter_spec(args.drafter, target))

    def price(r: dict) -> float | None:  # at its drafter's profile; plain decoding at any (C_v is the target's)
        shared = next(iter(pricing.values()), None) if r["method"] == "ar" else None
        return priced_ms_per_token(r, pricing.get(r.get("drafter") or "", shared))

    summary = summarize(records, price)
    text = write_summary(summary, out, header)
    write_plots(records, summary, out)
    for i, (name, cm) in enumerate(cms.items()):  # the profiles the run used, kept beside its results
        stem = "cost_model" if i == 0 else f"cost_model_{name}"  # the first: the default drafter's
        plot_cost_model(cm, out / f"{stem}.png")
        save_cost_model(cm, out / f"{stem}.json")
    end = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    run = {"argv": sys.argv, "start": start, "end": end, "machine": machine_info(), "target": target.name,
           "drafters": drafters, "methods": methods, "datasets": names, "num_prompts": num, "first_prompt": first,
           "max_new_tokens": max_new, "repeats": args.repeats,
           "temperature": args.temperature, "seed": args.seed, "turns": args.turns,
           "cost_model": next((cm.provenance for cm in cms.values()), None)}
    prev = json.loads((out / "run.json").read_text()).get("runs", []) if (out / "run.json").is_file() else []
    (out / "run.json").write_text(json.dumps({"runs": prev + [run]}, indent=1, default=str))
    print(text)
