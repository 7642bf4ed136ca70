"""Lossless acceptance: the target's own choice at each tree node, and the walk down the tree. Pure tensor logic.

Every emitted token is a fresh draw from the target's (processed) distribution at a node whose prefix is exactly the
committed text, so the output distribution is that of plain decoding; greedy (temperature 0) is the argmax limit.
Drawing a choice at every node up front is the same as drawing along the walk: draws at different nodes are
independent, and only the ones on the walked path are used.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from caddtree import vocab


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0 = greedy
    top_k: int = 0            # 0 = off
    top_p: float = 1.0        # 1 = off

    def __post_init__(self):
        if not 0 <= self.temperature < float("inf"):
            raise ValueError(f"temperature must be >= 0 and finite, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must lie in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def target_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """logits [m, V] -> the processed sampling distribution [m, V] (temperature, then top-k, then top-p).

    The row maximum is subtracted before dividing by the temperature (softmax does not change): however small the
    temperature, nothing overflows, and a temperature that rounds the law to its argmax gives exactly that (the
    tied maxima uniformly), never NaN."""
    logits = logits.float()
    logits = (logits - logits.amax(-1, keepdim=True)) / params.temperature
    if params.top_k > 0:
        kth = torch.topk(logits, min(params.top_k, logits.shape[-1]), dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if params.top_p < 1.0:
        sorted_p, order = torch.sort(probs, dim=-1, descending=True)
        # keep the smallest set whose mass reaches top_p: a token is dropped if the mass before it already does
        drop_sorted = (torch.cumsum(sorted_p, dim=-1) - sorted_p) >= params.top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def target_choices(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None = None):
    """logits [m, V] -> the target's token at each of the m positions [m] (argmax, or one draw per position)."""
    if params.greedy:
        return vocab.argmax(logits)  # = logits.argmax(-1), a few times faster on CPU
    probs = target_probs(logits, params)
    return torch.multinomial(probs.cpu(), 1, generator=generator).squeeze(-1).to(logits.device)


def accept_walk(tokens: torch.Tensor, parents: torch.Tensor, choices: torch.Tensor) -> tuple[list[int], int]:
    """Walk from the root while the target's choice at the current node is one of its children.

    tokens [n], parents [n] (-1 = root) describe the tree; choices [n + 1] is the target's token at [root, nodes].
    Returns (accepted node indices, root to leaf, in order; bonus token = the choice at the last accepted node).
    """
    children: dict[tuple[int, int], int] = {}
    for i, (tok, par) in enumerate(zip(tokens.tolist(), parents.tolist())):
        children.setdefault((par, tok), i)
    choice = choices.tolist()
    path, node = [], -1
    while (node, choice[node + 1]) in children:
        node = children[(node, choice[node + 1])]
        path.append(node)
    return path, choice[node + 1]


def accepted_along(tokens: torch.Tensor, parents: torch.Tensor, depths: torch.Tensor, continuation: list[int],
                   final: bool = False) -> int | None:
    """How many nodes of a draft tree the text that followed its root accepts: `accept_walk` with continuation[d] as
    the target's choice at every depth-d node (the root: continuation[0]). This prices a tree that was never verified
    (what a round would have yielded with another draft) once the output is known. Greedy: exact (the choice at a
    node is the argmax after its prefix). Sampling: the outcome had each prefix's draw been the one the output used,
    which has the law of a fresh verify (draws at different prefixes are independent). None while the continuation
    is not longer than the tree is deep, unless `final` (the output has ended: no later token can be accepted).
    """
    deepest = int(depths.max()) if depths.numel() else 0
    if len(continuation) <= deepest and not final:
        return None
    known = list(continuation) + [-1] * (deepest + 1 - len(continuation))  # -1: no token ever matches it
    choices = torch.tensor([known[0]] + [known[d] for d in depths.tolist()])
    return len(accept_walk(tokens, parents, choices)[0])
