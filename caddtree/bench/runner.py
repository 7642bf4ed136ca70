"""Running the bench: every (dataset, prompt, method) not yet recorded, methods back to back per prompt, one record
appended per finished run (so an interrupted run loses no finished work and resumes where it stopped).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from tqdm import tqdm

from caddtree.bench.methods import PEERS, bench_decoder, variant_target
from caddtree.bench.peers import PeerCrashed, run_hf, run_llamacpp
from caddtree.bench.records import config_key, load_records, record_key, utc_timestamp
from caddtree.engine import Decoder
from caddtree.errors import CaddtreeError


def _second_turn_ids(target, item: dict, max_new_tokens: int):
    """MT-Bench turn 2: [turn 1, the model's own greedy answer to it, turn 2] through the chat template."""
    tok = target.tokenizer
    first = Decoder(target).generate(target.chat_ids(item["turns"][0]), max_new_tokens).tokens
    answer = tok.decode(first, skip_special_tokens=True)
    msgs = [{"role": "user", "content": item["turns"][0]}, {"role": "assistant", "content": answer},
            {"role": "user", "content": item["turns"][1]}]
    return target.messages_ids(msgs)


def prompt_schedule(prompts: dict, methods: list[str], done: set, config: str,
                    part: tuple[int, int]) -> list[tuple[int, str, dict]]:
    """[(j, dataset, item)] still to run in this part: prompts round-robin over the datasets (prompt 0 of each, then
    prompt 1, ...), every K-th from the I-th for part (I, K); j counts this part's prompts."""
    i_part, k_parts = part
    rounds = max((len(items) for items in prompts.values()), default=0)
    order = [(ds, items[i]) for i in range(rounds) for ds, items in prompts.items() if i < len(items)]
    return [(j // k_parts, ds, item) for j, (ds, item) in enumerate(order) if j % k_parts == i_part - 1
            and any((ds, m, str(item["id"]), config) not in done for m in methods)]


def method_order(methods: list[str], j: int) -> list[str]:
    """`ar` first, then the other methods forward on even prompts and backward on odd ones, so no method always runs
    right after the same other one (the machine's state drifts within a prompt's runs)."""
    head = [m for m in methods if m == "ar"]
    rest = [m for m in methods if m != "ar"]
    return head + (rest if j % 2 == 0 else rest[::-1])


def build_decoders(methods: list[str], target, drafter_for, cost_model_for) -> dict:
    """method -> (Decoder, drafter description) for our engine's methods; each drafter and its cost model (profiled
    on first use) built once, before the timed runs."""
    drafters, costs = {}, {}

    def drafter_cached(kind):
        if kind not in drafters:
            drafters[kind] = drafter_for(kind)
        return drafters[kind]

    def cost_cached(drafter):
        if id(drafter) not in costs:
            costs[id(drafter)] = cost_model_for(drafter)
        return costs[id(drafter)]

    return {m: bench_decoder(m, target, drafter_cached, cost_cached) for m in methods if m not in PEERS}


def run_method(m: str, target, ids, max_new_tokens: int, sampling, seed: int, decoder, skipped: dict) -> dict:
    """One run's measured fields, or {"skipped": why} (a peer not installed or crashed: `skipped` remembers it) or
    {"error": why} (e.g. prompt + max_new_tokens past the context window; a peer's own failure)."""
    if m in skipped:
        return {"skipped": skipped[m]}
    try:
        return _run_one(m, target, ids, max_new_tokens, sampling, seed, decoder)
    except (ImportError, PeerCrashed) as e:  # optional peer not installed, or its process died
        skipped[m] = f"not installed ({e})" if isinstance(e, ImportError) else str(e)
        print(f"bench: skipping {m}: {skipped[m]}", file=sys.stderr)
        return {"skipped": skipped[m]}
    except CaddtreeError as e:
        return {"error": str(e)}
    except Exception as e:  # noqa: BLE001  a peer's own failure must not end a long run
        if m not in PEERS:
            raise
        return {"error": f"{type(e).__name__}: {e}"}


def mark_match(rec: dict, ref: list[int] | None, greedy: bool) -> None:
    """match_ar: the output equals plain decoding's (greedy only); first_mismatch: where it first differs."""
    rec["match_ar"] = None if (ref is None or not greedy) else rec["tokens"] == ref
    if rec["match_ar"] is False:
        n = min(len(ref), len(rec["tokens"]))
        rec["first_mismatch"] = next((i for i in range(n) if ref[i] != rec["tokens"][i]), n)


def merge_repeat(old: dict, run: dict) -> dict:
    """A method's record over repeats: the fastest run, every run's time, whether all matched and were identical."""
    rec = {**(run if run["ms_per_token"] < old["ms_per_token"] else old),
           "ms_per_token_runs": old["ms_per_token_runs"] + [run["ms_per_token"]],
           "match_ar": None if old.get("match_ar") is None else old["match_ar"] and run["match_ar"],
           "runs_identical": old["runs_identical"] and run.get("tokens") == old.get("tokens")}
    rec.pop("first_mismatch", None)
    mismatch = [x["first_mismatch"] for x in (old, run) if "first_mismatch" in x]
    if mismatch:
        rec["first_mismatch"] = min(mismatch)
    return rec


def item_ids(target, item: dict, encode):
    """A prompt record's token ids: its `messages` through the chat template, else encode(its `prompt`)."""
    return target.messages_ids(item["messages"]) if "messages" in item else encode(item["prompt"])


def run_bench(target, drafter_for, cost_model_for, prompts: dict, methods: list[str], out_dir, max_new_tokens: int,
              sampling, seed: int = 0, turns: int = 1, encode=None, progress: bool = True,
              part: tuple[int, int] = (1, 1), repeats: int = 1) -> list[dict]:
    """Run every (dataset, prompt, method) not yet recorded in out_dir; returns all records of this config.

    target: a loaded Target; drafter_for('auto' (= --drafter) or a --drafter spec) -> Drafter;
    cost_model_for(drafter) -> CostModel; prompts: {dataset: [{id, prompt[, turns]} or {id, messages}]};
    encode(text) -> prompt ids (default target.chat_ids);
    part (I, K): this process takes prompts I-1, I-1+K, ... of the round-robin order.
    repeats R: each prompt's methods run R times, the order reversed each time, and a method's record is its fastest
    run (`ms_per_token_runs` lists all; `match_ar` holds only if every run matched, `runs_identical` if every run gave
    the same tokens): on a shared machine the fastest of R runs of every method is the steadier comparison.
    """
    if repeats < 1:
        raise CaddtreeError(f"--repeats must be >= 1, got {repeats}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / ("records.jsonl" if part[1] == 1 else f"records.part{part[0]}of{part[1]}.jsonl")
    config = config_key(target.name, max_new_tokens, sampling, turns, seed)
    old = [r for r in load_records(out_dir) if r.get("config") == config]
    done = {record_key(r) for r in old}
    refs = {(r["dataset"], r["prompt_id"]): r["tokens"] for r in old if r["method"] == "ar" and "tokens" in r}
    encode = encode or target.chat_ids
    methods = sorted(methods, key=lambda m: m != "ar")  # `ar` first: its tokens are the exact-match reference
    todo = prompt_schedule(prompts, methods, done, config, part)
    total = repeats * sum(1 for _, ds, item in todo for m in methods if (ds, m, str(item["id"]), config) not in done)
    decoders = build_decoders(methods, target, drafter_for, cost_model_for) if todo else {}
    if todo:  # warm-up (untimed): first calls pay for allocation and kernel selection
        ids = item_ids(target, todo[0][2], encode)
        for dec, _ in decoders.values():
            dec.generate(ids, 4, sampling, seed=seed)
    skipped, skip_recs = {}, []
    bar = tqdm(total=total, desc="bench", unit="run", file=sys.stderr, disable=not progress, dynamic_ncols=True)
    with open(path, "a") as f:
        for j, ds, item in todo:
            ids = (_second_turn_ids(target, item, max_new_tokens) if turns == 2 and len(item.get("turns") or []) > 1
                   else item_ids(target, item, encode))
            key = (ds, str(item["id"]), config)
            run = lambda m: run_method(m, target, ids, max_new_tokens, sampling, seed, decoders.get(m), skipped)  # noqa: E731
            for rec in _run_prompt(key, len(ids), methods, j, repeats, done, refs, sampling.greedy, run, bar,
                                   skip_recs):
                f.write(json.dumps(rec) + "\n")
                f.flush()
                done.add(record_key(rec))
    bar.close()
    return [r for r in load_records(out_dir) if r.get("config") == config] + skip_recs  # every part


def _run_prompt(key, prompt_len, methods, j, repeats, done, refs, greedy, run, bar, skip_recs):
    """Yield each method's finished record for one prompt (key = (dataset, prompt id, config)), its runs
    `repeats` times in `method_order`; skipped runs go to skip_recs (not written: a rerun with the peer installed
    fills them in)."""
    ds, pid, config = key
    best, final = {}, set()  # method -> its fastest run so far; methods skipped or failed on this prompt
    for r, m in ((r, m) for r in range(repeats) for m in method_order(methods, j + r)):
        if (ds, m, pid, config) in done or m in final:
            continue
        bar.set_postfix_str(f"{ds} #{pid} {m}" + (f" ({r + 1}/{repeats})" if repeats > 1 else ""))
        rec = {"dataset": ds, "method": m, "prompt_id": pid, "config": config, "prompt_len": prompt_len,
               "time": utc_timestamp(), **run(m)}
        if m == "ar" and "tokens" in rec and (ds, pid) not in refs:
            refs[(ds, pid)] = rec["tokens"]
        if "tokens" in rec:
            mark_match(rec, refs.get((ds, pid)), greedy)
        bar.update(1 if "ms_per_token" in rec else repeats - r)  # a failed method is not run again
        if "skipped" in rec:
            skip_recs.append(rec)
            final.add(m)
            continue
        if "ms_per_token" not in rec:  # an error: recorded once (or the runs before it, if any)
            final.add(m)
            rec = best.get(m, rec)
        elif m in best:  # a repeat: keep the fastest run, every run's time, and whether all matched
            rec = merge_repeat(best[m], rec)
        elif repeats > 1:  # runs_identical: every run gave the same tokens (checkable without `ar`)
            rec["ms_per_token_runs"], rec["runs_identical"] = [rec["ms_per_token"]], True
        best[m] = rec
        if r == repeats - 1 or m in final:  # the record is complete
            yield rec


def _run_one(m, target, ids, max_new_tokens, sampling, seed, decoder) -> dict:
    if m in ("hf", "hf-lookup", "llamacpp"):
        r = (run_llamacpp(target, ids, max_new_tokens, sampling, seed) if m == "llamacpp" else  # HF: as loaded
             run_hf(variant_target(target.name, "fp32", unmodified=True) if target.lean or target.packed else target,
                    ids, max_new_tokens, sampling, seed, lookup=m == "hf-lookup"))
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
    if any(r.drafted is not None for r in res.rounds):  # the speculation gate decided: rounds without a draft
        rec["drafted"] = [int(r.drafted is not False) for r in res.rounds]
    return rec
