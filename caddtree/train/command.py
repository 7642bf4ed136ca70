"""`caddtree train-drafter` and `caddtree eval-drafter`: options, their checks, and the stages they run.

Every option value a run would only trip over after loading the target (minutes) is checked first, one line each.
Each stage resumes: data appends shards after the last whole one, train continues from out/ckpt.pt.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from caddtree.dflash import default_target_layers
from caddtree.errors import CaddtreeError
from caddtree.files import find_data_dir
from caddtree.options import check_out_path
from caddtree.target import DEFAULT_TARGET, load_target
from caddtree.train.config import TrainConfig
from caddtree.train.data import generate_data, load_tokens, save_tokens
from caddtree.train.evaluate import _drafter_from, eval_references, evaluate
from caddtree.train.loop import train_drafter


def _log_to(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)

    def log(line: str) -> None:
        print(line, flush=True)
        with open(path, "a") as f:
            f.write(line + "\n")
    return log


def _load_target(spec):
    return load_target(spec or DEFAULT_TARGET)


# ----------------------------------------------------------------------------------------------------- train-drafter
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
    layers = default_target_layers(target.config.num_hidden_layers, args.num_target_layers)
    if args.stage == "load-tokens":
        load_tokens(target, Path(args.tokens), out, log=log)
    if args.stage in ("data", "all"):
        generate_data(target, out, find_data_dir(args.data_dir), max_prompts=args.max_prompts,
                      batch_size=args.gen_batch, max_prompt_tokens=args.max_prompt_tokens,
                      max_new_tokens=args.max_new_tokens, max_minutes=args.max_minutes, target_layers=layers,
                      first_prompt=args.first_prompt, log=log)
    if args.stage in ("train", "all"):
        train_drafter(target, out, TrainConfig.from_args(args), log=log)


# ----------------------------------------------------------------------------------------------------- eval-drafter
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


def _tree_budgets(spec: str) -> list[int]:
    parts = [b.strip() for b in spec.split(",") if b.strip()]
    if not all(b.isdigit() and int(b) >= 1 for b in parts):
        raise CaddtreeError(f"--budgets must be node counts >= 1 separated by commas (e.g. 8,16,32), got '{spec}'")
    return [int(b) for b in parts]


def cmd_eval(args) -> dict:
    check_out_path(args.json, "--json", directory=False)
    for flag, value in (("--n", args.n), ("--max-new-tokens", args.max_new_tokens), ("--threads", args.threads)):
        if value < 1:
            raise CaddtreeError(f"{flag} must be >= 1, got {value}")
    budgets = _tree_budgets(args.budgets)
    torch.set_num_threads(args.threads)
    target = _load_target(args.target)
    drafter = _drafter_from(args.drafter, target)
    ddir = find_data_dir(args.data_dir)
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


def main(argv=None) -> None:
    """`python -m caddtree.train train-drafter|eval-drafter ...` (the shipped drafter's recipe runs it so)."""
    ap = argparse.ArgumentParser(prog="python -m caddtree.train")
    sub = ap.add_subparsers(dest="cmd", required=True)
    add_train_parser(sub)
    add_eval_parser(sub)
    args = ap.parse_args(argv)
    try:
        args.func(args)
    except CaddtreeError as e:
        raise SystemExit(f"error: {e}")
