"""The `caddtree` command line: generate, profile, bench, train-drafter, eval-drafter.

Every user mistake surfaces as one line `caddtree: error: ...` (CaddtreeError), never a deep traceback.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from caddtree.accept import SamplingParams
from caddtree.bench.command import add_bench_parser
from caddtree.engine import Decoder, GenerationResult
from caddtree.errors import CaddtreeError
from caddtree.options import (add_method_args, add_model_args, check_cost_model_arg, check_out_path,
                              describe_drafter, load_drafter_spec, load_target_from, setup_torch)
from caddtree.profile import ensure_cost_model
from caddtree.serve.app import create_app, serve
from caddtree.serve.text import StopText
from caddtree.serve.worker import Worker
from caddtree.train.command import add_eval_parser, add_train_parser

EXAMPLE_PROMPT = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
                  "How many clips did Natalia sell altogether in April and May? Think step by step.")


def make_decoder(args, target) -> Decoder:
    """The decoder `add_method_args`' options name on `target`, with the --drafter it needs (none for ar)."""
    drafter = load_drafter_spec(args.drafter, target) if args.method != "ar" else None
    cost = ensure_cost_model(target, drafter, path=args.cost_model) if args.method == "caddtree" else None
    return Decoder(target, drafter, method=args.method, budget=args.budget, cost_model=cost)


def check_generate_args(args) -> SamplingParams:
    """Every option of `generate` checked before the slow loads; returns the sampling parameters."""
    setup_torch(args)
    sampling = SamplingParams(args.temperature, args.top_k, args.top_p)
    if args.budget < 1:
        raise CaddtreeError(f"--budget must be >= 1, got {args.budget}")
    if args.max_new_tokens <= 0:
        raise CaddtreeError(f"--max-new-tokens must be > 0, got {args.max_new_tokens}")
    check_cost_model_arg(args.cost_model)
    check_out_path(args.json, "--json", directory=False)
    return sampling


def stream_printer(tokenizer):
    """on_tokens callback: prints each round's new text once it is certain (decoded with its left context, so merges
    come out right; an incomplete multi-byte character is held until a later round completes it, not printed as
    U+FFFD). `stream.finish()` prints what is held when the generation ends. One decode a round (`StopText`, the
    server's, with no stop strings)."""
    text = StopText(lambda ids: tokenizer.decode(ids, skip_special_tokens=True), [])

    def stream(new):
        sys.stdout.write(text.push(new))
        sys.stdout.flush()
    stream.finish = lambda: sys.stdout.write(text.finish())
    return stream


def summary_line(method: str, s: dict) -> str:
    return (f"[{method}] {s['new_tokens']} tokens, {s['tokens_per_s']:.1f} tok/s, {s['ms_per_token']:.1f} ms/token, "
            f"mean accepted length {s['tau']:.2f}, tree size {s['tree_size_mean']:.1f} ± {s['tree_size_std']:.1f}")


def compare_with_plain(target, ids, args, sampling, res: GenerationResult, report: dict) -> None:
    """Decode the same prompt plainly; print the speed-up and whether the outputs are identical."""
    base = Decoder(target).generate(ids, args.max_new_tokens, sampling, seed=args.seed)
    b, same = base.summary(), base.tokens == res.tokens
    print(f"[ar] {b['new_tokens']} tokens, {b['tokens_per_s']:.1f} tok/s, {b['ms_per_token']:.1f} ms/token | "
          f"speed-up {b['ms_per_token'] / res.ms_per_token:.2f}x | output identical to plain decoding: "
          f"{'yes' if same else 'NO' if sampling.greedy else 'n/a (sampling)'}", file=sys.stderr)
    report["ar"], report["identical_to_ar"] = b, same


def cmd_generate(args) -> None:
    sampling = check_generate_args(args)
    target = load_target_from(args)
    decoder = make_decoder(args, target)
    ids = target.chat_ids(args.prompt if args.prompt is not None else EXAMPLE_PROMPT, template=not args.raw)
    print(f"target {target.name} | method {args.method}"
          + (f" | drafter {describe_drafter(args.drafter, target)}" if decoder.drafter else "")
          + f" | prompt {len(ids)} tokens | exactness {target.exactness}", file=sys.stderr)
    printer = stream_printer(target.tokenizer)
    res = decoder.generate(ids, args.max_new_tokens, sampling, seed=args.seed, on_tokens=printer)
    printer.finish()
    print()
    report = {"method": args.method, **res.summary()}
    print(summary_line(args.method, report), file=sys.stderr)
    if args.compare and args.method != "ar":
        compare_with_plain(target, ids, args, sampling, res, report)
    if args.json:
        Path(args.json).write_text(json.dumps({**report, "rounds": res.round_records()}, indent=1))


def cmd_profile(args) -> None:
    check_out_path(args.out, "--out", directory=False)
    setup_torch(args)
    target = load_target_from(args)
    drafter = load_drafter_spec(args.drafter, target)
    model = ensure_cost_model(target, drafter, path=args.out, preset=args.preset, force=True)
    for ctx in model.ctxs:
        sizes = [n for n in (1, 4, 8, 16, 64) if n <= model.max_nodes]
        pts = ", ".join([f"C_v(0)={model.plain_step_ms(ctx):.1f}"]  # without o_plain - o (`verify_curve`)
                        + [f"C_v({n})={model.verify_ms(n, ctx):.1f}" for n in sizes])
        fit_note = (f", +{model.pass_ms[model.ctxs.index(ctx)]:.1f} ms per extra pass of {model.row_group} rows"
                  if model.row_group > 1 and model.verify_fit == "convex" else f" ({model.verify_fit} fit)")
        print(f"ℓ={int(ctx)}: C_d={model.draft_ms(ctx):.1f} ms, overhead={model.overhead_ms(ctx):.2f} ms "
              f"+ {model.overhead_node:.3f} per node (the plain option: {model.plain_overhead_ms(ctx):.2f} ms), "
              f"{pts}{fit_note}")


def cmd_serve(args) -> None:
    setup_torch(args)
    if not 0 < args.port < 65536:
        raise CaddtreeError(f"--port must lie in 1..65535, got {args.port}")
    if args.max_queue < 1:
        raise CaddtreeError(f"--max-queue must be >= 1, got {args.max_queue}")
    target = load_target_from(args)
    worker = Worker(make_decoder(args, target), max_queue=args.max_queue, start=False)  # decodes here
    name = args.served_model_name or target.name
    print(f"caddtree: serving {name} ({args.method}" + (f", drafter {describe_drafter(args.drafter, target)}"
                                                         if worker.decoder.drafter else "")
          + f") on http://{args.host}:{args.port}/v1", file=sys.stderr)
    serve(worker, create_app(worker, name, target.max_context), args.host, args.port, args.graceful_timeout)


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

    s = sub.add_parser("serve", help="an OpenAI-compatible HTTP server (/v1/chat/completions, /v1/completions)")
    add_model_args(s)
    add_method_args(s)
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--served-model-name", default=None, help="the `model` clients pass (default: the --target)")
    s.add_argument("--max-queue", type=int, default=16,
                   help="requests that may wait while one decodes; more are answered 429 (default 16)")
    s.add_argument("--graceful-timeout", type=float, default=30.0,
                   help="on SIGTERM/Ctrl-C, seconds to let running streams finish before ending them (default 30)")
    s.set_defaults(func=cmd_serve)

    add_train_parser(sub)
    add_eval_parser(sub)
    add_bench_parser(sub)
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
