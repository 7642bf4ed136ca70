"""The OpenAI request bodies the server accepts (pydantic), and the checks that turn a bad one into a 400 naming the
field. Fields OpenAI defines that we do not implement are refused when set to a value that would change the output
(n > 1, logprobs, best_of > 1, echo), and ignored otherwise, as OpenAI-compatible servers do."""
from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class BadRequest(Exception):
    """A request the server refuses with 400: `param` names the field (OpenAI's error body)."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message, self.param, self.code = message, param, code


class StreamOptions(BaseModel):
    include_usage: bool = False


class TextPart(BaseModel):
    type: Literal["text"]
    text: str


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None

    def text(self) -> str:
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        return "".join(p.text for p in self.content)


class Common(BaseModel):
    """Parameters shared by both endpoints; OpenAI's defaults (temperature 1, top_p 1); top_k is ours (0 = off)."""
    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    max_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: str | list[str] | None = Field(default=None)
    n: int = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    logprobs: bool | int | None = None

    def limit(self) -> int | None:
        return self.max_tokens

    def check(self) -> None:
        """Value checks pydantic's types do not express (one BadRequest naming the field)."""
        if self.n != 1:
            raise BadRequest(f"n = {self.n} is not supported: this server returns one choice (n = 1)", "n")
        if self.logprobs:
            raise BadRequest("logprobs are not supported by this server", "logprobs")
        if not math.isfinite(self.temperature) or not 0 <= self.temperature <= 2:
            raise BadRequest(f"temperature must lie in [0, 2], got {self.temperature}", "temperature")
        if not math.isfinite(self.top_p) or not 0 < self.top_p <= 1:
            raise BadRequest(f"top_p must lie in (0, 1], got {self.top_p}", "top_p")
        if self.top_k < 0:
            raise BadRequest(f"top_k must be >= 0 (0 = off), got {self.top_k}", "top_k")
        limit = self.limit()
        if limit is not None and limit <= 0:
            raise BadRequest(f"max_tokens must be > 0, got {limit}", "max_tokens")
        if len(self.stop_list()) > 16:
            raise BadRequest("at most 16 stop strings", "stop")

    def stop_list(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])


class ChatRequest(Common):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = None

    def limit(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


class CompletionRequest(Common):
    prompt: str | list[str] | list[int]
    max_tokens: int | None = 16  # OpenAI's default for /v1/completions
    echo: bool = False
    best_of: int | None = None

    def check(self) -> None:
        super().check()
        if self.echo:
            raise BadRequest("echo is not supported by this server", "echo")
        if self.best_of not in (None, 1):
            raise BadRequest(f"best_of = {self.best_of} is not supported (1 only)", "best_of")
        if isinstance(self.prompt, list) and self.prompt and isinstance(self.prompt[0], str) and len(self.prompt) != 1:
            raise BadRequest(f"one prompt per request, got {len(self.prompt)}", "prompt")
