"""One decoding thread over one `Decoder`, fed by a bounded queue: what the server runs its requests on.

Why one thread: the target's KV cache, the drafter's context and the torch thread pool belong to one generation at a
time, and a CPU decode already uses every core. Requests wait in a queue of `max_queue`; past that `submit` refuses
at once (the server answers 429) instead of letting clients hang. Each job's events (text pieces, then one final
'done' or 'error') go to the event loop that submitted it, so no client ever sees another's tokens. A job whose
client has gone is skipped if still queued, or ended at the next round boundary (`Decoder.generate`'s `on_tokens`
returns True).

Per-generation state: `Decoder.generate` resets everything that shapes one output (the cache, the drafter's context,
the draft gate, the target's feature layers); what carries over between requests (the DFlash drafter's online
calibration) moves draft confidences only, never which tokens are emitted (tests/test_serve.py checks that a request
gives the same tokens before and after others).
"""
from __future__ import annotations

import asyncio
import queue
import sys
import threading
import traceback
from dataclasses import dataclass, field

import torch

from caddtree.accept import SamplingParams
from caddtree.engine import Decoder
from caddtree.serve.text import StopText


class QueueFull(Exception):
    """The server is at capacity: answer 429."""


class ShuttingDown(Exception):
    """The server no longer takes requests: answer 503."""


@dataclass
class Job:
    """One request's generation. Events put on `events` (an asyncio.Queue of the submitting loop):
    ('text', str) pieces of the answer; then ('done', info) or ('error', message)."""
    prompt_ids: torch.Tensor  # [P]
    max_tokens: int
    sampling: SamplingParams
    seed: int | None
    stops: list[str]
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue = field(default_factory=asyncio.Queue)
    cancelled: threading.Event = field(default_factory=threading.Event)

    def emit(self, kind: str, value) -> None:
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, (kind, value))
        except RuntimeError:  # the client's event loop is closed (server shut down): nobody is listening
            self.cancelled.set()

    def cancel(self) -> None:
        """The client has gone: skip the job, or end it at the next round."""
        self.cancelled.set()


class Worker:
    """Runs jobs one at a time on `decoder`: in a daemon thread of its own (`start=True`), or in the thread that calls
    `run()` — `caddtree serve` decodes on the main thread: here every OpenMP region entered from another thread cost
    ~50 µs more (libgomp), which doubled a SmolLM2 step of ~1300 small kernel calls (12 -> 27 ms)."""

    def __init__(self, decoder: Decoder, max_queue: int = 16, start: bool = True):
        self.decoder = decoder
        self.jobs: queue.Queue = queue.Queue(maxsize=max_queue)
        self.busy = False
        self.closing = False
        self.thread = None
        if start:
            self.thread = threading.Thread(target=self.run, name="caddtree-decode", daemon=True)
            self.thread.start()

    @property
    def waiting(self) -> int:
        return self.jobs.qsize()

    def submit(self, job: Job) -> None:
        if self.closing:
            raise ShuttingDown("the server is shutting down")
        try:
            self.jobs.put_nowait(job)
        except queue.Full:
            raise QueueFull(f"the server is busy ({self.jobs.maxsize} requests already waiting): retry later") \
                from None

    def close(self, timeout: float = 30.0) -> None:
        """Take no more jobs; end those still waiting with an error; let the running one finish (up to `timeout`)."""
        self.closing = True
        while True:
            try:
                job = self.jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job.emit("error", "the server is shutting down")
        self.jobs.put(None)
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(timeout)

    def run(self, alive=lambda: True) -> None:
        """Decode jobs until `close()`, or until `alive()` turns false (checked twice a second while idle)."""
        while True:
            try:
                job = self.jobs.get(timeout=0.5)
            except queue.Empty:
                if not alive():
                    return
                continue
            if job is None:
                return
            if job.cancelled.is_set():
                continue
            self.busy = True
            try:
                job.emit("done", self._generate(job))
            except Exception as e:  # a bug, not bad input (the server checked that): keep serving the others
                traceback.print_exc(file=sys.stderr)
                job.emit("error", f"generation failed: {type(e).__name__}: {e}")
            finally:
                self.busy = False

    def _generate(self, job: Job) -> dict:
        text = StopText(self.decoder.target.detokenize, job.stops)

        def on_tokens(new: list[int]) -> bool:
            piece = text.push(new)
            if piece:
                job.emit("text", piece)
            return text.stopped or job.cancelled.is_set()

        res = self.decoder.generate(job.prompt_ids, job.max_tokens, job.sampling, seed=job.seed, on_tokens=on_tokens)
        rest = text.finish()
        if rest:
            job.emit("text", rest)
        reason = {"eos": "stop", "length": "length"}.get(res.stop_reason, "stop")
        if job.cancelled.is_set():
            reason = "cancelled"
        s = res.summary()
        return {"finish_reason": reason, "prompt_tokens": res.prompt_len, "completion_tokens": len(res.tokens),
                "tokens": list(res.tokens),
                "stats": {"method": self.decoder.method, "mean_accepted_length": s["tau"],
                          "mean_tree_size": s["tree_size_mean"], "rounds": s["rounds"],
                          "ms_per_token": s["ms_per_token"], "tokens_per_s": s["tokens_per_s"],
                          "prefill_ms": s["prefill_ms"]}}
