"""Command-line options shared by `caddtree generate`, `profile`, `bench`, `train-drafter` and `eval-drafter`, and the
checks that turn a wrong option into one line naming the fix before any slow load. Also how a `--drafter` spec
becomes a drafter, and where the shipped drafters live (package data: `caddtree/drafters/<name>`).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from caddtree.dflash import load_drafter
from caddtree.drafter import LookupMixtureDrafter, PromptLookupDrafter
from caddtree.errors import CaddtreeError
from caddtree.target import DEFAULT_TARGET, WEIGHTS, load_target

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
SHIPPED_DRAFTERS = Path(__file__).resolve().parent / "drafters"
SHIPPED_DRAFTER = {DEFAULT_TARGET: SHIPPED_DRAFTERS / "smollm2-135m-instruct-dflash"}


def shipped_drafter(target) -> Path | None:
    """The DFlash drafter directory shipped for this target, if this checkout has one: by the target's built-in name,
    or for another file of the same model (`Target.model_id`, e.g. a user's Q4_K_M of SmolLM2) by the model its
    config names (`target_model`)."""
    path = SHIPPED_DRAFTER.get(target.name)
    if path is None and target.model_id:
        path = next((p for p in SHIPPED_DRAFTER.values() if drafter_target_model(p) == target.model_id), None)
    return path if path is not None and (path / "config.json").is_file() else None


def drafter_target_model(path: Path) -> str:
    """The `target_model` a drafter directory's config names ('' if none or unreadable: `load_drafter` says why)."""
    try:
        return str(json.loads((path / "config.json").read_text()).get("target_model", ""))
    except (OSError, ValueError, AttributeError):
        return ""


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default=DEFAULT_TARGET,
                   help=f"built-in name ({DEFAULT_TARGET}), local HF model dir, .gguf file, or hub id")
    p.add_argument("--drafter", default="auto",
                   help="'auto' (= 'dflash+lookup' where a DFlash drafter ships for the target, else 'lookup'; "
                        "see docs/results.md), 'lookup' (prompt lookup), "
                        "'dflash' (the shipped DFlash drafter for the target), a DFlash drafter directory, "
                        "or either + '+lookup' (prompt lookup mixed into its marginals, e.g. dflash+lookup)")
    p.add_argument("--weights", default="auto", choices=WEIGHTS,
                   help="native: a GGUF target's linears read the file's 4-8-bit blocks (Q4_0/1, Q5_0/1, Q8_0, "
                        "Q4_K, Q5_K, Q6_K, F16, BF16; exact, fewer bytes per step); fp32: its dequantised fp32 "
                        "weights (default auto: native for a GGUF target on CPU)")
    p.add_argument("--dtype", default="float32", choices=list(DTYPES),
                   help="the target's compute dtype (default float32). On CPU, Llama-shaped models are exact in each: "
                        "linears and attention compute each row alone (bf16/fp16 weights read in place, sums in "
                        "fp32). Elsewhere (other devices, other families' attention) PyTorch's kernels depend on the "
                        "number of rows, so a speculative output may differ from plain decoding at a near-tie: "
                        "reported as 'not guaranteed'")
    p.add_argument("--device", default=None, help="cpu, cuda, ... (default: cuda if available)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")


def load_target_from(args):
    """The target `add_model_args`' options name (--target, --dtype, --device, --weights)."""
    return load_target(args.target, dtype=DTYPES[args.dtype], device=args.device, weights=args.weights)


def add_method_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--method", default="caddtree", choices=["caddtree", "ddtree", "ar"],
                   help="caddtree: cost-aware budget per round (default); ddtree: fixed budget; ar: plain decoding")
    p.add_argument("--budget", type=int, default=32, help="tree nodes per round for --method ddtree")
    p.add_argument("--cost-model", default=None, help="an existing cost profile JSON, e.g. from `caddtree profile "
                                                      "--out` (default: the per-user cache, profiled on first use)")


def resolve_drafter_spec(spec: str, target) -> str:
    """'auto' -> the spec it stands for on this target; any other spec unchanged."""
    if spec != "auto":
        return spec
    return "dflash+lookup" if shipped_drafter(target) is not None else "lookup"


def describe_drafter(spec: str, target) -> str:
    """What `--drafter spec` loads on this target, in words: the resolved spec and the shipped directory it reads."""
    resolved = resolve_drafter_spec(spec, target)
    where = f" from {shipped_drafter(target)}" if resolved.startswith("dflash") else ""
    return f"{resolved}{where}" + (" (auto)" if spec == "auto" else "")


def load_drafter_spec(spec: str, target):
    """'auto' | 'lookup' | 'dflash' | drafter dir, optionally '+lookup' ('dflash+lookup') -> Drafter.

    'auto' is 'dflash+lookup' (`drafter.LookupMixtureDrafter`: prompt lookup mixed into the shipped DFlash drafter's
    marginals) for a target with a shipped drafter, else 'lookup' (`resolve_drafter_spec`).
    """
    spec = resolve_drafter_spec(spec, target)
    if spec == "lookup":
        return PromptLookupDrafter(target.vocab_size)
    if spec.endswith("+lookup"):
        base = load_drafter_spec(spec[:-len("+lookup")], target)
        if isinstance(base, PromptLookupDrafter):
            raise CaddtreeError(f"--drafter {spec}: mix prompt lookup into a trained drafter, e.g. dflash+lookup")
        return LookupMixtureDrafter(base, PromptLookupDrafter(target.vocab_size, num_positions=base.num_positions))
    if spec == "dflash":
        path = shipped_drafter(target)
        if path is None:
            raise CaddtreeError(f"no shipped DFlash drafter for target '{target.name}': train one with "
                                f"`caddtree train-drafter --target {target.name}` and pass its directory")
        spec = str(path)
    if not Path(spec).exists():
        raise CaddtreeError(f"drafter not found: {spec} (give a DFlash drafter directory, 'dflash', 'lookup', "
                            f"'auto', or one of those + '+lookup')")
    return load_drafter(spec, target)


def check_cost_model_arg(path) -> None:
    """--cost-model names a profile to use: a missing file is a wrong path, not a request to profile into it (that is
    `caddtree profile --out`), so it fails before the slow loads instead of silently profiling for a minute."""
    if path is not None and not Path(path).is_file():
        raise CaddtreeError(f"--cost-model {path}: no such file: create it with `caddtree profile --out {path}` "
                            f"(same --target and --drafter), or leave --cost-model out to use the per-user cache")


def check_out_path(path, flag: str, directory: bool) -> None:
    """An output path of the wrong kind fails now, not after minutes of work: a file where a directory is wanted, or
    a directory where a file is."""
    if path is None:
        return
    path = Path(path)
    if directory and path.exists() and not path.is_dir():
        raise CaddtreeError(f"{flag} {path} is a file: give a directory (it is created if missing)")
    if not directory and path.is_dir():
        raise CaddtreeError(f"{flag} {path} is a directory: give a file path")


def setup_torch(args) -> None:
    if args.threads is not None and args.threads < 1:
        raise CaddtreeError(f"--threads must be >= 1, got {args.threads}")
    if args.threads:
        torch.set_num_threads(args.threads)
