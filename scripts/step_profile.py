"""Where one plain decoding step's time goes: the weights' linears (body, LM head), attention over the cache, and the
rest (norms, RoPE, cache writes, Python and dispatch overhead), for each weights/forward configuration, at one context.

    python scripts/step_profile.py [--target smollm2-135m-instruct] [--ctx 300] [--threads 2] [--steps 60]

--target takes what `caddtree generate` takes; for a Hugging Face directory or hub id the GGUF-block ('native') rows
are skipped.

Each configuration's step is timed whole (median over --steps) and, in a second pass, with every call of the linears
and of attention timed individually (means per step; 'other' = that pass's mean step - linears - LM head - attention:
norms, RoPE, cache writes, Python and dispatch). Prints a Markdown table
and the bandwidth floor (the bytes of the weights a step reads / this machine's read bandwidth, measured here).
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from caddtree import kernels, lean
from caddtree.errors import CaddtreeError
from caddtree.files import cpu_name
from caddtree.kernels import PackedLinear, QuantLinear
from caddtree.target import load_target

CONFIGS = {  # name -> load_target keywords (python_layers: the lean forward without its C++ layer loop)
    "native, lean": dict(weights="native"),
    "native, lean, Python layers": dict(weights="native", python_layers=True),
    "fp32 panel, lean": dict(weights="fp32"),
    "fp32 panel, HF forward": dict(weights="fp32", lean=False),
    "native, HF forward": dict(weights="native", lean=False),
    "HF as loaded (fp32, PyTorch linears)": dict(weights="fp32", pack=False, lean=False),
}


def read_bandwidth_gbs(mb: int = 1024, repeats: int = 10) -> float:
    """GB/s of a sum over a buffer far larger than the caches (what a weight-bound step is limited by): the best of
    `repeats`, as STREAM reports, since neighbours on a shared host only ever slow it down."""
    x = torch.ones(mb * 2**20 // 4)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        x.sum()
        times.append(time.perf_counter() - t0)
    return x.numel() * 4 / min(times) / 1e9


def weight_bytes(model) -> int:
    """Bytes the linears read per step (the LM head included)."""
    total = 0
    for m in model.modules():
        if isinstance(m, QuantLinear):
            total += m.rows.numel()
        elif isinstance(m, (PackedLinear, torch.nn.Linear)):
            total += m.weight.numel() * m.weight.element_size()
    return total


class Timers:
    """Wraps the kernels' entry points (and torch's SDPA) to add up their wall time per step."""

    def __init__(self, target):
        self.lib, self.t = kernels._library(), {"linears": 0.0, "lm_head": 0.0, "attention": 0.0}
        self.head = target.model.get_output_embeddings()
        self.native = getattr(target.lean, "native", None)  # lean_layers.cpp calls the kernels itself
        self.saved = {}

    def wrap(self, owner, name, key):
        fn = getattr(owner, name)
        self.saved[(owner, name)] = fn

        def timed(*a, **k):
            t0 = time.perf_counter()
            out = fn(*a, **k)
            self.t[key] += time.perf_counter() - t0
            return out
        setattr(owner, name, timed)

    def reset(self):
        self.t = dict.fromkeys(self.t, 0.0)
        if self.native is not None:
            self.native.take_times()

    def totals(self) -> dict:
        """Seconds per part since `reset`, the C++ layer loop's own timers added where it ran."""
        t = dict(self.t)
        if self.native is not None:
            lin, att = self.native.take_times()
            t["linears"] += lin
            t["attention"] += att
        return t

    def __enter__(self):
        self.wrap(F, "scaled_dot_product_attention", "attention")
        self.wrap(lean, "row_attention", "attention")  # lean.py's own name for the kernel
        for cls in (QuantLinear, PackedLinear, torch.nn.Linear):
            fwd = cls.forward
            self.saved[(cls, "forward")] = fwd

            def timed(mod, x, _fwd=fwd):
                t0 = time.perf_counter()
                out = _fwd(mod, x)
                self.t["lm_head" if mod is self.head else "linears"] += time.perf_counter() - t0
                return out
            cls.forward = timed
        return self

    def __exit__(self, *exc):
        for (owner, name), fn in self.saved.items():
            setattr(owner, name, fn)


def time_steps(target, ctx: int, steps: int, timers: Timers | None = None) -> list[float]:
    """ms of each of `steps` one-token steps on a context of `ctx` (after a prefill and 5 warm-up steps, which the
    timers do not count)."""
    ids = torch.arange(1000, 1000 + ctx) % target.vocab_size
    cache = target.new_cache()
    target.forward(ids, cache)
    one = torch.tensor([42])
    times = []
    for i in range(steps + 5):
        if i == 5 and timers is not None:
            timers.reset()
        t0 = time.perf_counter()
        target.forward(one, cache)
        if i >= 5:
            times.append(1000 * (time.perf_counter() - t0))
        cache.crop(-1)
    return times


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default="smollm2-135m-instruct")
    p.add_argument("--ctx", type=int, default=300)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--steps", type=int, default=60)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    bw = read_bandwidth_gbs()
    print(f"{cpu_name()}, {args.threads} thread(s), context {args.ctx}, read bandwidth {bw:.1f} GB/s\n")
    print("| configuration | step ms | linears (body) | LM head | attention | other | weights read | floor ms |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, kw in CONFIGS.items():
        kw = dict(kw)
        python_layers = kw.pop("python_layers", False)
        try:
            target = load_target(args.target, device="cpu", **kw)
        except CaddtreeError as e:  # e.g. native weights for a target that is not a GGUF file
            print(f"| {name} | n/a: {e} |")
            continue
        if python_layers:
            target.lean = lean.LeanForward(target.model, native=False)
        whole = statistics.median(time_steps(target, args.ctx, args.steps))
        with Timers(target) as tm:  # the parts are means per step of the timed pass; 'other' is its mean rest
            timed = statistics.fmean(time_steps(target, args.ctx, args.steps, tm))
        parts = tm.totals()
        lin, head, att = (1000 * parts[k] / args.steps for k in ("linears", "lm_head", "attention"))
        other = max(timed - lin - head - att, 0.0)
        total_b = weight_bytes(target.model)
        print(f"| {name} | {whole:.2f} | {lin:.2f} | {head:.2f} | {att:.2f} | {other:.2f} | {total_b / 1e6:.1f} MB "
              f"| {total_b / bw / 1e6:.2f} |")


if __name__ == "__main__":
    main()
