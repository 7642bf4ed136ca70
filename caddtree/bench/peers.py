"""The peers a user would pick instead of caddtree, timed as fairly as our engine: Hugging Face `generate` (plain, and
with prompt lookup) on the same model object, and llama.cpp on the same GGUF file in its own process.
"""
from __future__ import annotations

import multiprocessing as mp
import signal
import time
from pathlib import Path

import torch

from caddtree.errors import CaddtreeError
from caddtree.target import BUILTIN_GGUF, builtin_gguf


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
    if target.name in BUILTIN_GGUF:
        path = builtin_gguf(target.name)
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
        raise PeerCrashed(f"{e}; a llama-cpp-python built for this CPU (-march=native) can crash like this (on an "
                          f"Intel Xeon with AMX: in ggml's AMX matmul): rebuild it without AMX, e.g. CMAKE_ARGS=\""
                          f"-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=ON "
                          f"-DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON\" pip install --no-cache-dir "
                          f"--force-reinstall --no-deps llama-cpp-python") from None
