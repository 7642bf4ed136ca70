"""Token ids -> the text a client sees, round by round: incremental detokenisation with OpenAI's stop strings.

Invariants: the concatenation of everything `push` and `finish` return is the final text; the final text never
contains a stop string and is cut right before the first one (earliest position in the text, whichever string);
nothing is sent that a later round could take back — a tail that might still become a stop string, or an incomplete
UTF-8 character (decoded as U+FFFD), is held until the next round decides it.
"""
from __future__ import annotations

from collections.abc import Callable

REPLACEMENT = "\ufffd"


class StopText:
    """decode: token ids -> text (the tokenizer's, special tokens skipped); stops: the stop strings (may be empty)."""

    def __init__(self, decode: Callable[[list[int]], str], stops: list[str]):
        self.decode, self.stops = decode, [s for s in stops if s]
        self.tokens: list[int] = []
        self.sent = 0          # characters of the text already returned
        self.stopped = False   # a stop string was found: the text is final

    def push(self, new: list[int]) -> str:
        """Add one round's tokens; return the text that is now certain (possibly ''). Sets `stopped` when a stop
        string appears (the text up to it is returned; later calls return '')."""
        if self.stopped:
            return ""
        self.tokens.extend(new)
        text = self.decode(self.tokens)
        cut = min((i for i in (text.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            self.stopped = True
            return self._send(text, cut)
        safe = len(text) - self._held(text)
        return self._send(text, safe)

    def finish(self) -> str:
        """The generation ended (EOS, length, cancel): the rest of the text, stop-string prefixes included."""
        if self.stopped:
            return ""
        self.stopped = True
        return self._send(self.decode(self.tokens), None)

    def _held(self, text: str) -> int:
        """Characters at the end of `text` that a later round could still change or turn into a stop string."""
        held = len(text) - len(text.rstrip(REPLACEMENT))  # an incomplete multi-byte character
        for s in self.stops:  # the longest tail that is a proper prefix of a stop string
            for k in range(min(len(s) - 1, len(text)), 0, -1):
                if text.endswith(s[:k]):
                    held = max(held, k)
                    break
        return held

    def _send(self, text: str, end: int | None) -> str:
        end = len(text) if end is None else end
        out = text[self.sent:end] if end > self.sent else ""
        self.sent = max(self.sent, end)
        return out
