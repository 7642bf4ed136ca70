"""The server's overhead: one chat request through `caddtree serve` (streamed, openai client) against the same
prompt decoded in-process as `caddtree generate` does, alternating, same target/drafter/method/threads.

    python scripts/serve_overhead.py [--threads 2] [--repeats 6] [--max-tokens 128] [--out results/serve-overhead]

Both sides time the whole request, prefill included: wall ms per generated token (client side: from sending the
request to the last token; in-process: `Decoder.generate` with a streaming callback like the CLI's), and the time to
the first streamed text. The server process stays idle while the in-process decode runs, and the reverse.
Writes run.json and summary.md to --out.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import torch

from caddtree.accept import SamplingParams
from caddtree.cli import EXAMPLE_PROMPT, make_decoder
from caddtree.files import cpu_name
from caddtree.target import load_target


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def via_server(client, max_tokens: int) -> dict:
    t0 = time.perf_counter()
    first, text, usage, ext = None, [], None, None
    for c in client.chat.completions.create(model="smollm2-135m-instruct", temperature=0, max_tokens=max_tokens,
                                            messages=[{"role": "user", "content": EXAMPLE_PROMPT}], stream=True,
                                            stream_options={"include_usage": True}):
        if c.choices and c.choices[0].delta.content:
            first = first or time.perf_counter()
            text.append(c.choices[0].delta.content)
        if c.choices and c.choices[0].finish_reason:
            ext = c.model_extra.get("caddtree")
        if c.usage:
            usage = c.usage
    t1 = time.perf_counter()
    n = usage.completion_tokens
    return {"wall_ms_per_token": 1000 * (t1 - t0) / n, "ttft_ms": 1000 * (first - t0), "tokens": n,
            "text": "".join(text), "decode_ms_per_token": ext["ms_per_token"]}


def in_process(target, decoder, max_tokens: int) -> dict:
    first, streamed = [], []

    def on_tokens(new):  # as the CLI's stream printer: decode the text so far
        streamed.extend(new)
        target.detokenize(streamed)
        if not first:
            first.append(time.perf_counter())
    t0 = time.perf_counter()
    ids = target.chat_ids(EXAMPLE_PROMPT)
    res = decoder.generate(ids, max_tokens, SamplingParams(), on_tokens=on_tokens)
    t1 = time.perf_counter()
    n = len(res.tokens)
    return {"wall_ms_per_token": 1000 * (t1 - t0) / n, "ttft_ms": 1000 * (first[0] - t0), "tokens": n,
            "text": target.detokenize(res.tokens), "decode_ms_per_token": res.ms_per_token}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--repeats", type=int, default=6)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--method", default="caddtree")
    p.add_argument("--out", default="results/serve-overhead")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    # first in-process: a cost profile missing from the cache is measured here, before the server reads it
    target = load_target("smollm2-135m-instruct", device="cpu")
    decoder = make_decoder(argparse.Namespace(method=args.method, drafter="auto", budget=32, cost_model=None), target)
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "caddtree.cli", "serve", "--threads", str(args.threads),
                               "--method", args.method, "--port", str(port)], env=os.environ.copy())
    try:
        for _ in range(600):
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.5)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0, timeout=600)
        via_server(client, 8), in_process(target, decoder, 8)  # warm-up both
        runs = {"server": [], "generate": []}
        for _ in range(args.repeats):
            runs["server"].append(via_server(client, args.max_tokens))
            runs["generate"].append(in_process(target, decoder, args.max_tokens))
    finally:
        server.terminate()
        server.wait(60)
    med = {k: {m: statistics.median(r[m] for r in v) for m in ("wall_ms_per_token", "ttft_ms",
                                                                "decode_ms_per_token")} for k, v in runs.items()}
    same = all(r["text"] == runs["generate"][0]["text"] for v in runs.values() for r in v)
    ratio = med["server"]["wall_ms_per_token"] / med["generate"]["wall_ms_per_token"]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    info = {"cpu": cpu_name(), "threads": args.threads, "method": args.method, "max_tokens": args.max_tokens,
            "repeats": args.repeats, "medians": med, "server_over_generate": ratio, "identical_text": same,
            "runs": {k: [{m: x for m, x in r.items() if m != "text"} for r in v] for k, v in runs.items()}}
    (out / "run.json").write_text(json.dumps(info, indent=1))
    lines = [f"# Server overhead ({cpu_name()}, {args.threads} threads, {args.method}, {args.max_tokens} tokens, "
             f"median of {args.repeats})", "",
             "| path | wall ms/token (prefill incl.) | decode ms/token | time to first text (ms) |",
             "|---|---:|---:|---:|"]
    for k, m in med.items():
        lines.append(f"| {k} | {m['wall_ms_per_token']:.2f} | {m['decode_ms_per_token']:.2f} | {m['ttft_ms']:.0f} |")
    lines += ["", f"server / generate wall ms per token: {ratio:.3f}; identical text in every run: {same}"]
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
