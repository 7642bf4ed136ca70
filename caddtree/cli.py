"""The `caddtree` command line: generate, profile, train-drafter, eval-drafter, bench.

Every user mistake surfaces as one line `caddtree: error: ...` (CaddtreeError), never a deep traceback.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from caddtree.errors import CaddtreeError
from caddtree.target import DEFAULT_TARGET

EXAMPLE_PROMPT = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
                  "How many clips did Natalia sell altogether in April and May? Think step by step.")
SHIPPED_DRAFTERS = Path(__file__).resolve().parent.parent / "drafters"
SHIPPED_DRAFTER = {DEFAULT_TARGET: SHIPPED_DRAFTERS / "smollm2-135m-instruct-dflash"}


def shipped_drafter(target) -> Path | None:
    """The DFlash drafter directory shipped for this target, if this checkout has one."""
    path = SHIPPED_DRAFTER.get(target.name)
    return path if path is not None and (path / "config.json").is_file() else None


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default=DEFAULT_TARGET,
                   help=f"built-in name ({DEFAULT_TARGET}), local HF model dir, .gguf file, or hub id")
    p.add_argument("--drafter", default="auto",
                   help="'auto' (= 'dflash+lookup' where a DFlash drafter ships for the target, else 'lookup'; "
                        "see results/), 'lookup' (prompt lookup), "
                        "'dflash' (the shipped DFlash drafter for the target), a DFlash drafter directory, "
                        "or either + '+lookup' (prompt lookup mixed into its marginals, e.g. dflash+lookup)")
    p.add_argument("--device", default=None, help="cpu, cuda, ... (default: cuda if available)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")


def add_method_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--method", default="caddtree", choices=["caddtree", "ddtree", "ar"],
                   help="caddtree: cost-aware budget per round (default); ddtree: fixed budget; ar: plain decoding")
    p.add_argument("--budget", type=int, default=32, help="tree nodes per round for --method ddtree")
    p.add_argument("--cost-model", default=None, help="an existing cost profile JSON, e.g. from `caddtree profile "
                                                      "--out` (default: the per-user cache, profiled on first use)")


def load_drafter_spec(spec: str, target):
    """'auto' | 'lookup' | 'dflash' | drafter dir, optionally '+lookup' ('dflash+lookup') -> Drafter.

    'auto' is 'dflash+lookup' (drafter.LookupMixtureDrafter: prompt lookup mixed into the shipped DFlash drafter's
    marginals) for a target with a shipped drafter, else 'lookup'. With the phase-4 DFlash drafter the mix ran
    CaDDTree faster than prompt lookup alone on 6 of 8 datasets of the CPU benchmark (results/bench-t0-256-phase4:
    less time per token on AIME25, GSM8K, HumanEval, MBPP, MT-Bench (5-29%) and AlpacaEval (1%), more on MATH-500
    (1.5%) and LiveCodeBench (6%)).
    """
    from caddtree.drafter import LookupMixtureDrafter, PromptLookupDrafter
    if spec == "auto":
        spec = "dflash+lookup" if shipped_drafter(target) is not None else "lookup"
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
    from caddtree.dflash import load_drafter
    if not Path(spec).exists():
        raise CaddtreeError(f"drafter not found: {spec} (give a DFlash drafter directory, 'dflash', 'lookup', "
                            f"'auto', or one of those + '+lookup')")
    return load_drafter(spec, target)


def make_decoder(args, target, drafter):
    from caddtree.engine import Decoder
    cost = None
    if args.method == "caddtree":
        from caddtree.profile import ensure_cost_model
        cost = ensure_cost_model(target, drafter, path=args.cost_model)
    return Decoder(target, drafter, method=args.method, budget=args.budget, cost_model=cost)


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


def describe_drafter(drafter) -> str:
    return getattr(drafter, "name", type(drafter).__name__)


def cmd_generate(args) -> None:
    from caddtree.accept import SamplingParams
    from caddtree.engine import Decoder
    from caddtree.target import load_target
    setup_torch(args)
    sampling = SamplingParams(args.temperature, args.top_k, args.top_p)  # validate before the slow load
    if args.budget < 1:
        raise CaddtreeError(f"--budget must be >= 1, got {args.budget}")
    if args.max_new_tokens <= 0:
        raise CaddtreeError(f"--max-new-tokens must be > 0, got {args.max_new_tokens}")
    check_cost_model_arg(args.cost_model)
    check_out_path(args.json, "--json", directory=False)
    target = load_target(args.target, device=args.device)
    drafter = load_drafter_spec(args.drafter, target) if args.method != "ar" else None
    decoder = make_decoder(args, target, drafter)
    prompt = args.prompt if args.prompt is not None else EXAMPLE_PROMPT
    ids = target.chat_ids(prompt, template=not args.raw)
    print(f"target {target.name} | method {args.method}"
          + (f" | drafter {describe_drafter(drafter)}" if drafter else "") + f" | prompt {len(ids)} tokens",
          file=sys.stderr)
    streamed = []

    def stream(new):
        before = target.tokenizer.decode(streamed, skip_special_tokens=True)
        streamed.extend(new)
        sys.stdout.write(target.tokenizer.decode(streamed, skip_special_tokens=True)[len(before):])
        sys.stdout.flush()

    res = decoder.generate(ids, args.max_new_tokens, sampling, seed=args.seed, on_tokens=stream)
    print()
    s = res.summary()
    report = {"method": args.method, **s}
    line = (f"[{args.method}] {s['new_tokens']} tokens, {s['tokens_per_s']:.1f} tok/s, "
            f"{s['ms_per_token']:.1f} ms/token, mean accepted length {s['tau']:.2f}, "
            f"tree size {s['tree_size_mean']:.1f} ± {s['tree_size_std']:.1f}")
    print(line, file=sys.stderr)
    if args.compare and args.method != "ar":
        base = Decoder(target).generate(ids, args.max_new_tokens, sampling, seed=args.seed)
        b = base.summary()
        same = base.tokens == res.tokens
        print(f"[ar] {b['new_tokens']} tokens, {b['tokens_per_s']:.1f} tok/s, {b['ms_per_token']:.1f} ms/token | "
              f"speed-up {b['ms_per_token'] / s['ms_per_token']:.2f}x | output identical to plain decoding: "
              f"{'yes' if same else 'NO' if sampling.greedy else 'n/a (sampling)'}", file=sys.stderr)
        report["ar"] = b
        report["identical_to_ar"] = same
    if args.json:
        Path(args.json).write_text(json.dumps({**report, "rounds": res.round_records()}, indent=1))


def cmd_profile(args) -> None:
    from caddtree.profile import ensure_cost_model
    from caddtree.target import load_target
    check_out_path(args.out, "--out", directory=False)
    setup_torch(args)
    target = load_target(args.target, device=args.device)
    drafter = load_drafter_spec(args.drafter, target)
    model = ensure_cost_model(target, drafter, path=args.out, preset=args.preset, force=True)
    for ctx in model.ctxs:
        pts = ", ".join(f"C_v({n})={model.verify_ms(n, ctx):.1f}" for n in (0, 1, 4, 8, 16, 64)
                        if n <= model.max_nodes)
        fit_note = (f", +{model.pass_ms[model.ctxs.index(ctx)]:.1f} ms per extra pass of {model.row_group} rows"
                  if model.row_group > 1 and model.verify_fit == "convex" else f" ({model.verify_fit} fit)")
        print(f"ℓ={int(ctx)}: C_d={model.draft_ms(ctx):.1f} ms, overhead={model.overhead_ms(ctx):.2f} ms, "
              f"{pts}{fit_note}")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="caddtree", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)

    g = sub.add_parser("generate", help="generate an answer with tree speculative decoding")
    g.add_argument("prompt", nargs="?", default=None, help="user prompt (default: a built-in GSM8K-style example)")
    add_model_args(g)
    add_method_args(g)
    g.add_argument("--max-new-tokens", type=int, default=128)
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--raw", action="store_true", help="feed the prompt as plain text, without the chat template")
    g.add_argument("--no-compare", dest="compare", action="store_false",
                   help="skip the plain-decoding run of the same prompt")
    g.add_argument("--json", default=None, help="write the summary and per-round statistics to this file")
    g.set_defaults(func=cmd_generate)

    p = sub.add_parser("profile", help="measure this machine's verify/draft costs and fit the cost model")
    add_model_args(p)
    p.add_argument("--preset", default="full", choices=["coarse", "full"])
    p.add_argument("--out", default=None, help="cost profile JSON (default: the per-user cache entry)")
    p.set_defaults(func=cmd_profile)

    from caddtree.train import add_eval_parser, add_train_parser
    add_train_parser(sub)
    add_eval_parser(sub)
    try:
        from caddtree.bench import add_bench_parser
        add_bench_parser(sub)
    except ImportError:
        pass
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except CaddtreeError as e:
        print(f"caddtree: error: {e}", file=sys.stderr)
        return 2
    except ValueError as e:  # invalid option values (temperature, top-p, budget ...) raised by the library
        print(f"caddtree: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a path the checks above could not foresee (permissions, a full disk ...)
        print(f"caddtree: error: {e.strerror or e}: {e.filename or ''} (check the path, its permissions and free "
              f"space)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("caddtree: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
