"""`caddtree serve`: an OpenAI-compatible HTTP API over one `Decoder` (FastAPI on uvicorn).

    POST /v1/chat/completions, POST /v1/completions   (stream: true -> server-sent events, ending 'data: [DONE]')
    GET  /v1/models, GET /health

Every response carries OpenAI's `usage`; the extension field `caddtree` carries what makes the decode different
(method, mean accepted length τ, mean tree size, ms/token). Errors use OpenAI's body
{"error": {"message", "type", "param", "code"}}: 400 for a bad request (naming the field), 429 when the queue is
full, 503 while shutting down; never a traceback. Decoding is lossless, so at temperature 0 a response holds exactly
the tokens `caddtree generate` produces for the same prompt and settings.
"""
from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
import uuid
from contextlib import asynccontextmanager

import uvicorn

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from caddtree.accept import SamplingParams
from caddtree.errors import CaddtreeError
from caddtree.serve.schemas import BadRequest, ChatRequest, CompletionRequest, Common
from caddtree.serve.worker import Job, QueueFull, ShuttingDown, Worker

ERROR_TYPES = {400: "invalid_request_error", 404: "not_found_error", 429: "rate_limit_error", 503: "server_error",
               500: "server_error"}


def error_response(status: int, message: str, param: str | None = None, code: str | None = None) -> JSONResponse:
    body = {"error": {"message": message, "type": ERROR_TYPES.get(status, "invalid_request_error"), "param": param,
                      "code": code}}
    return JSONResponse(body, status_code=status)


def validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    """pydantic's first error -> (one line, the field it names)."""
    err = exc.errors()[0]
    loc = [str(p) for p in err.get("loc", ()) if p != "body"]
    if err.get("type") == "json_invalid":
        return f"the request body is not valid JSON ({err.get('ctx', {}).get('error', 'parse error')})", None
    if not loc:
        return f"the request body must be a JSON object: {err.get('msg')}", None
    field = ".".join(loc)
    return f"{field}: {err.get('msg')}", loc[0]


def create_app(worker: Worker, model_name: str, max_context: int) -> FastAPI:
    """The API over `worker` (which owns the decoder); `model_name` is what clients pass as `model`."""
    target = worker.decoder.target

    @asynccontextmanager
    async def lifespan(app):
        yield
        await asyncio.to_thread(worker.close)  # after uvicorn has let open streams finish (graceful shutdown)

    app = FastAPI(title="caddtree", lifespan=lifespan)

    @app.exception_handler(RequestValidationError)
    async def on_invalid(request, exc):
        message, param = validation_message(exc)
        return error_response(400, message, param)

    @app.exception_handler(BadRequest)
    async def on_bad(request, exc):
        return error_response(400, exc.message, exc.param, exc.code)

    @app.exception_handler(StarletteHTTPException)
    async def on_http(request, exc):
        return error_response(exc.status_code, str(exc.detail))

    @app.exception_handler(Exception)
    async def on_crash(request, exc):
        return error_response(500, f"internal error: {type(exc).__name__}")

    @app.get("/health")
    async def health():
        return {"status": "shutting down" if worker.closing else "ok", "running": worker.busy,
                "waiting": worker.waiting}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": 0,
                                            "owned_by": "caddtree", "max_model_len": max_context}]}

    def prompt_ids(req: Common, ids) -> tuple:
        """Checks the request against the model and its context -> (ids [P], max_tokens, sampling)."""
        req.check()
        if req.model is not None and req.model != model_name:
            raise BadRequest(f"model '{req.model}' is not served here: use '{model_name}' (GET /v1/models)", "model",
                             "model_not_found")
        P = int(ids.shape[0])
        if P == 0:
            raise BadRequest("the prompt is empty", "prompt" if isinstance(req, CompletionRequest) else "messages")
        if P > max_context:
            raise BadRequest(f"the prompt has {P} tokens but the context window is {max_context}: shorten it",
                             "messages" if isinstance(req, ChatRequest) else "prompt", "context_length_exceeded")
        limit = req.limit()
        room = max_context - P + 1  # the last new token is never fed back (Decoder._check)
        if limit is not None and limit > room:
            raise BadRequest(f"max_tokens ({limit}) + the prompt ({P} tokens) exceed the context window "
                             f"({max_context}): ask for at most {room}", "max_tokens", "context_length_exceeded")
        return ids, limit if limit is not None else room, SamplingParams(req.temperature, req.top_k, req.top_p)

    def chat_ids(req: ChatRequest):
        if not getattr(target.tokenizer, "chat_template", None):
            raise BadRequest(f"model '{model_name}' has no chat template: use /v1/completions", "messages")
        try:
            return target.messages_ids([{"role": m.role, "content": m.text()} for m in req.messages])
        except Exception as e:  # the model's own template refuses this conversation (e.g. roles out of order)
            raise BadRequest(f"the model's chat template refused these messages: {str(e).splitlines()[0]}",
                             "messages") from None

    def completion_ids(req: CompletionRequest):
        p = req.prompt
        if isinstance(p, list) and not p:
            raise BadRequest("the prompt is empty", "prompt")
        if isinstance(p, list) and isinstance(p[0], int):  # token ids
            bad = [t for t in p if not 0 <= t < target.vocab_size]
            if bad:
                raise BadRequest(f"prompt token id {bad[0]} is outside the vocabulary [0, {target.vocab_size})",
                                 "prompt")
            return target.as_ids(p)
        text = p[0] if isinstance(p, list) else p
        return target.as_ids(target.tokenizer(text)["input_ids"]) if text else target.as_ids([])

    @app.post("/v1/chat/completions")
    async def chat(req: ChatRequest, request: Request):
        return await run(req, request, *prompt_ids(req, chat_ids(req)), chat=True)

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest, request: Request):
        return await run(req, request, *prompt_ids(req, completion_ids(req)), chat=False)

    async def run(req: Common, request: Request, ids, max_tokens: int, sampling: SamplingParams, chat: bool):
        job = Job(ids, max_tokens, sampling, req.seed, req.stop_list(), asyncio.get_running_loop())
        try:
            worker.submit(job)
        except QueueFull as e:
            return error_response(429, str(e), code="server_busy")
        except ShuttingDown as e:
            return error_response(503, str(e), code="shutting_down")
        head = {"id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:24]}", "created": int(time.time()),
                "model": model_name, "object": "chat.completion" if chat else "text_completion"}
        if req.stream:
            usage = bool(req.stream_options and req.stream_options.include_usage)
            return StreamingResponse(stream(job, head, chat, usage), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        return await collect(job, head, chat, request)

    return app


async def collect(job: Job, head: dict, chat: bool, request: Request):
    """A non-streaming response; a client that disconnects while waiting cancels its job."""
    pieces = []
    while True:
        try:
            kind, value = await asyncio.wait_for(job.events.get(), timeout=0.5)
        except asyncio.TimeoutError:
            if await request.is_disconnected():
                job.cancel()
                return error_response(400, "client disconnected")
            continue
        if kind == "text":
            pieces.append(value)
        elif kind == "error":
            return error_response(503 if "shutting down" in value else 500, value)
        else:
            text = "".join(pieces)
            choice = ({"index": 0, "message": {"role": "assistant", "content": text}} if chat else
                      {"index": 0, "text": text, "logprobs": None})
            choice["finish_reason"] = value["finish_reason"]
            return {**head, "choices": [choice], "usage": usage_of(value), "caddtree": value["stats"]}


def usage_of(info: dict) -> dict:
    return {"prompt_tokens": info["prompt_tokens"], "completion_tokens": info["completion_tokens"],
            "total_tokens": info["prompt_tokens"] + info["completion_tokens"]}


def sse(obj) -> str:
    return f"data: {json.dumps(obj)}\n\n"


async def stream(job: Job, head: dict, chat: bool, usage: bool):
    """Server-sent events as OpenAI sends them: for chat, a first delta with the role, content deltas, a last chunk
    with finish_reason; then, if asked, a chunk with `usage` and no choices; then [DONE]. A client that disconnects
    (the generator is cancelled or closed) cancels its job."""
    kind_name = "chat.completion.chunk" if chat else "text_completion"
    base = {**head, "object": kind_name}

    def chunk(content: str | None, finish: str | None = None, role: bool = False) -> dict:
        if chat:
            delta = ({"role": "assistant", "content": ""} if role else
                     {"content": content} if content is not None else {})
            return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return {**base, "choices": [{"index": 0, "text": content or "", "logprobs": None, "finish_reason": finish}]}

    try:
        if chat:
            yield sse(chunk(None, role=True))
        while True:
            kind, value = await job.events.get()
            if kind == "text":
                yield sse(chunk(value))
            elif kind == "error":
                yield sse({"error": {"message": value, "type": "server_error", "param": None, "code": None}})
                break
            else:
                yield sse({**chunk(None, value["finish_reason"]), "caddtree": value["stats"]})
                if usage:
                    yield sse({**base, "choices": [], "usage": usage_of(value)})
                break
        yield "data: [DONE]\n\n"
    finally:
        job.cancel()  # no-op once the job is done; ends it at the next round if the client has gone


def serve(worker: Worker, app: FastAPI, host: str, port: int, graceful_timeout: float = 30.0) -> None:
    """Run the HTTP server in a thread and `worker` (made with start=False) on this, the main, thread until SIGTERM or
    Ctrl-C: uvicorn then stops taking connections, lets running streams finish (up to `graceful_timeout` s), and its
    lifespan shutdown closes the worker, which ends this call. A second signal ends the streams at once."""
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning",
                                           timeout_graceful_shutdown=graceful_timeout))

    def run_http():
        try:
            server.run()
        except SystemExit:  # uvicorn's exit when it cannot bind: reported below, in one line
            pass

    def on_signal(signum, frame):
        if server.should_exit:
            server.force_exit = True
        server.should_exit = True
    # installed before the HTTP thread starts: a client can get its first chunk (the role delta) before this thread
    # would next look at server.started, and a SIGTERM then must not meet the default handler
    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    http = threading.Thread(target=run_http, name="caddtree-http", daemon=True)
    try:
        http.start()
        while not server.started:
            if not http.is_alive():
                raise CaddtreeError(f"cannot serve on {host}:{port} (in use, or not an address of this machine): "
                                    f"pass another --port or --host")
            time.sleep(0.05)
        worker.run(alive=http.is_alive)
        http.join(graceful_timeout + 5)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
