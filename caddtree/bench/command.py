"""`caddtree bench`: its options, and the command that runs or reports a benchmark.
"""
from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path

import torch
import transformers

from caddtree.accept import SamplingParams
from caddtree.bench.methods import PERTURB, parse_methods
from caddtree.bench.plots import write_plots
from caddtree.bench.records import config_key, load_records, record_files, utc_timestamp
from caddtree.bench.report import write_summary
from caddtree.bench.runner import run_bench
from caddtree.bench.stats import priced_ms_per_token, summarize
from caddtree.costfile import load_cost_model, plot_cost_model, save_cost_model
from caddtree.datasets import load_prompt_file, load_prompts
from caddtree.drafter import drafter_id
from caddtree.errors import CaddtreeError
from caddtree.files import cpu_name
from caddtree.kernels import kernel_version, packing_available
from caddtree.options import (add_model_args, check_cost_model_arg, check_out_path, load_drafter_spec,
                              load_target_from, setup_torch)
from caddtree.profile import ensure_cost_model


ALL_DATASETS = "math500,gsm8k,aime25,humaneval,mbpp,livecodebench,mt_bench,alpaca"


DEFAULT_METHODS = "ar,ddtree:8,16,32,64,caddtree"


QUICK = dict(num_prompts=1, max_new_tokens=16, methods="ar,ddtree:4,caddtree")


def machine_info() -> dict:

    return {"cpu": cpu_name(), "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "cpu_kernel": kernel_version() if packing_available() else "pytorch",
            "torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(), "platform": platform.platform()}


def add_bench_parser(sub) -> None:
    b = sub.add_parser("bench", help="benchmark every method on the paper's datasets (records, summary, plots)")
    add_model_args(b)
    b.add_argument("--datasets", default=None,
                   help=f"comma list (default: {ALL_DATASETS}; none when --prompts is given)")
    b.add_argument("--prompts", default=None, metavar="FILE",
                   help="your own prompts: JSON lines, each with a 'prompt' string (one user turn) or a 'messages' "
                        "list of {role, content}, optional 'id'; benchmarked as one more set beside --datasets")
    b.add_argument("--prompts-name", default=None, metavar="NAME",
                   help="the set's name in records and summaries (default: the file's name without extension)")
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
    found = {}
    for path in sorted(out.glob("cost_model*.json")):
        cm = load_cost_model(path)
        if path.stem != "cost_model":
            found[path.stem[len("cost_model_"):]] = cm
        elif cm.provenance.get("drafter_id") == drafter_id(drafter := default_drafter()):
            found[type(drafter).__name__] = cm
    return found


def check_bench_args(args) -> dict:
    """Every option checked before any slow load -> the run's settings (num, max_new, methods, sampling, part,
    names, first, prompts)."""
    check_cost_model_arg(args.cost_model)
    check_out_path(args.out, "--out", directory=True)
    for flag, value in (("--num-prompts", args.num_prompts), ("--max-new-tokens", args.max_new_tokens)):
        if value is not None and value < 1:  # 0 would otherwise read as "not given" and run the default size
            raise CaddtreeError(f"{flag} must be >= 1, got {value}")
    q = QUICK if args.quick else dict(num_prompts=10, max_new_tokens=256, methods=DEFAULT_METHODS)
    methods = parse_methods(args.methods or q["methods"])
    if args.perturb:
        methods += [f"caddtree@{p}" for p in PERTURB if f"caddtree@{p}" not in methods]
    datasets = args.datasets if args.datasets is not None else "" if args.prompts else ALL_DATASETS
    names = [d.strip() for d in datasets.split(",") if d.strip()]
    own = None
    if args.prompts:
        own = args.prompts_name or Path(args.prompts).name.split(".")[0]
        if own in names or own in ALL_DATASETS.split(","):
            raise CaddtreeError(f"--prompts: the set name '{own}' is a built-in dataset's: pass --prompts-name")
    elif args.prompts_name:
        raise CaddtreeError("--prompts-name names the set of --prompts FILE: give the file too")
    if not names and own is None:
        raise CaddtreeError(f"--datasets names no dataset: give some of {ALL_DATASETS}, or --prompts FILE")
    if args.first_prompt < 0:
        raise CaddtreeError(f"--first-prompt must be >= 0, got {args.first_prompt}")
    if args.repeats < 1:
        raise CaddtreeError(f"--repeats must be >= 1, got {args.repeats}")
    if args.report and not record_files(args.out):
        raise CaddtreeError(f"--report: {args.out} holds no bench records: run the command without --report first")
    run = dict(num=args.num_prompts or q["num_prompts"], max_new=args.max_new_tokens or q["max_new_tokens"],
               methods=methods, sampling=SamplingParams(args.temperature, args.top_k, args.top_p),
               part=_parse_part(args.part), names=names + ([own] if own else []), first=args.first_prompt)
    first, num = run["first"], run["num"]
    run["prompts"] = {d: load_prompts(d, first + num, data_dir=args.data_dir)[first:] for d in names}
    if own:
        run["prompts"][own] = load_prompt_file(args.prompts)[first:first + num]
    empty = [d for d in run["names"] if not run["prompts"][d]]
    if empty:
        raise CaddtreeError(f"--first-prompt {first} is past the last prompt of {', '.join(empty)}: lower it")
    return run


def finished_records(out: Path, target, run: dict, args) -> list[dict]:
    """--report: the records of this config whose prompt finished every method (medians and speed-ups then compare
    the same prompts)."""
    config = config_key(target.name, run["max_new"], run["sampling"], args.turns, args.seed)
    asked = {(d, str(x["id"])) for d in run["names"] for x in run["prompts"][d]}
    records = [r for r in load_records(out) if r.get("config") == config and r["method"] in run["methods"]
               and (r["dataset"], r["prompt_id"]) in asked]
    have = {}
    for r in records:
        have.setdefault((r["dataset"], r["prompt_id"]), set()).add(r["method"])
    records = [r for r in records if have[(r["dataset"], r["prompt_id"])] >= set(run["methods"])]
    if not records:
        raise CaddtreeError(f"--report: no prompt in {out} has finished every method with these options (datasets, "
                            f"--methods, prompts, --max-new-tokens, sampling, --seed): run them without --report")
    return records


def summary_header(target, records: list[dict], run: dict, args) -> str:
    drafters = sorted({r["drafter"] for r in records if r.get("drafter")})
    repeats = max((len(r.get("ms_per_token_runs", [0])) for r in records), default=1)  # --report: from the records
    first = run["first"]
    return (f"# caddtree bench\n\ntarget `{target.name}`, drafter(s) {', '.join(drafters) or '–'}, "
            f"{run['num']} prompts per dataset{f' from prompt {first}' if first else ''}, {run['max_new']} new tokens, "
            f"temperature {args.temperature}, "
            f"{torch.get_num_threads()} torch threads. ms/token = decode time per output token, prefill excluded"
            f"{f', the fastest of {repeats} runs per prompt and method' if repeats > 1 else ''} "
            f"(HF peers: t(N tokens) - t(1 token) over N - 1; llama.cpp: its token stream, token 1 to N); "
            f"speed-up = median ms/token of `ar` / the method's.\n")


def append_run_json(out: Path, args, run: dict, records: list[dict], target, cms: dict, start: str) -> None:
    """run.json: one entry per invocation (argv, times, machine, settings, the cost model's provenance)."""
    end = utc_timestamp()
    entry = {"argv": sys.argv, "start": start, "end": end, "machine": machine_info(), "target": target.name,
             "weights": target.weights, "dtype": str(target.dtype), "exactness": target.exactness,
             "drafters": sorted({r["drafter"] for r in records if r.get("drafter")}), "methods": run["methods"],
             "datasets": run["names"], "num_prompts": run["num"], "first_prompt": run["first"],
             "max_new_tokens": run["max_new"], "repeats": args.repeats,
             "temperature": args.temperature, "seed": args.seed, "turns": args.turns,
             "cost_model": next((cm.provenance for cm in cms.values()), None)}
    prev = json.loads((out / "run.json").read_text()).get("runs", []) if (out / "run.json").is_file() else []
    (out / "run.json").write_text(json.dumps({"runs": prev + [entry]}, indent=1, default=str))


def cmd_bench(args) -> None:
    run = check_bench_args(args)  # fail fast, before loading models
    start = utc_timestamp()
    setup_torch(args)
    target = load_target_from(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cms = {}  # drafter class name -> the cost model the run used
    drafter_for = lambda kind: load_drafter_spec(args.drafter if kind == "auto" else kind, target)  # noqa: E731

    def cost_model_for(drafter):
        cm = ensure_cost_model(target, drafter, path=args.cost_model)
        cms[type(drafter).__name__] = cm
        return cm

    print(f"bench: {target.name} | {len(run['names'])} datasets x {run['num']} prompts x {len(run['methods'])} "
          f"methods | {run['max_new']} new tokens | T={args.temperature} | out {out}", file=sys.stderr)
    if args.report:  # no runs: summarise what the records hold (a split run's parts, an interrupted run)
        records = finished_records(out, target, run, args)
    else:
        records = run_bench(target, drafter_for, cost_model_for, run["prompts"], run["methods"], out, run["max_new"],
                            run["sampling"], seed=args.seed, turns=args.turns, part=run["part"],
                            repeats=args.repeats)
    records = [r for r in records if r["dataset"] in run["names"] and r["method"] in run["methods"]]
    # all resumed, or --report: keep the profiles the run saved; only a directory without one gets the cached profile
    if not cms and not (out / "cost_model.json").is_file() and any("caddtree" in m for m in run["methods"]):
        cost_model_for(drafter_for("auto"))
    pricing = cms or saved_cost_models(out, lambda: drafter_for("auto"))

    def price(r: dict) -> float | None:  # at its drafter's profile; plain decoding at any (C_v is the target's)
        shared = next(iter(pricing.values()), None) if r["method"] == "ar" else None
        return priced_ms_per_token(r, pricing.get(r.get("drafter") or "", shared))

    summary = summarize(records, price)
    text = write_summary(summary, out, summary_header(target, records, run, args))
    write_plots(records, summary, out)
    for i, (name, cm) in enumerate(cms.items()):  # the profiles the run used, kept beside its results
        stem = "cost_model" if i == 0 else f"cost_model_{name}"  # the first: the default drafter's
        plot_cost_model(cm, out / f"{stem}.png")
        save_cost_model(cm, out / f"{stem}.json")
    append_run_json(out, args, run, records, target, cms, start)
    print(text)
