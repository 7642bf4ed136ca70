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
    """logits [m, V] -> the processed sampling distribution [m, V] (temperature, then top-k, then top-p): the law
    every decoder samples from (the reference; `sample_token` draws from it one row at a time, fast).

    The row maximum is subtracted before dividing by the temperature (softmax does not change): however small the
    temperature, nothing overflows, and a temperature that rounds the law to its argmax gives exactly that (the
    tied maxima uniformly), never NaN. Top-p keeps the smallest set of most probable tokens whose mass reaches
    top_p, plus every token tied with the least probable of them (so the set does not depend on how a sort orders
    ties); the masses are summed in float64 from p = exp(z - logsumexp(z)), as `sample_token` sums them."""
    z = tempered(logits, params.temperature)
    if params.top_k > 0:
        kth = torch.topk(z, min(params.top_k, z.shape[-1]), dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    probs = torch.softmax(z, dim=-1)
    if params.top_p < 1.0:
        sorted_z, _ = torch.sort(z, dim=-1, descending=True)
        p = (sorted_z - torch.logsumexp(z, -1, keepdim=True)).exp().double()
        kept = (p.cumsum(-1) - p) < params.top_p  # a prefix: the mass before a token only grows
        least = sorted_z.gather(-1, kept.sum(-1, keepdim=True) - 1)  # [m, 1] the least probable kept logit
        probs = probs.masked_fill(z < least, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


FP32_ZERO = 2.0 ** -150  # a temperature at or below this rounds to 0 in fp32: (x - max) / T would give 0 / 0


def tempered(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """logits [..., V] -> (x - max) / T in fp32, row by row; a temperature that rounds to 0 in fp32 as its limit:
    0 at the row's maxima, -inf elsewhere (the law: the tied maxima uniformly), where the division would give NaN."""
    z = logits.float()
    z = z - z.amax(-1, keepdim=True)
    if temperature <= FP32_ZERO:
        return torch.where(z == 0, 0.0, float("-inf"))
    return z / temperature


NUCLEUS_FIRST = 64  # candidates `nucleus` looks at first (x4 until the kept set lies inside them)


def nucleus(z: torch.Tensor, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """z [V] processed logits (tempered, top-k applied) -> (tokens [k], p [k] float64): the tokens top-p keeps,
    descending, and their probabilities exp(z - logsumexp z), not renormalised; as `target_probs` keeps them.

    Only the best 64, 256, ... tokens are looked at (`vocab.top_k`), until the kept set and every token tied with
    its least probable member lie inside them: a full sort of a 49k vocabulary took ~3.5 ms on this project's CPU."""
    V = z.shape[0]
    lse = torch.logsumexp(z, 0)
    m = NUCLEUS_FIRST
    while True:
        vals, idx = vocab.top_k(z[None], min(m, V))  # [1, m] descending
        vals, idx = vals[0], idx[0]
        p = (vals - lse).exp().double()
        n = int(((p.cumsum(0) - p) < top_p).sum())  # kept: a prefix (the mass before a token only grows)
        least = vals[n - 1]
        if m >= V or (n < len(vals) and vals[-1] < least):  # the kept set and its ties are all in view
            inside = vals >= least
            return idx[inside], p[inside]
        m *= 4


def sample_token(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None = None) -> int:
    """logits [V] -> one draw from `target_probs`' law (the argmax if greedy), in a fraction of its time.

    Why: sorting a 49k vocabulary and a multinomial over it took ~5 ms per row on this project's CPU, ~40% of a
    plain step, and a tree verify drew at every node. Here top-p looks only at the head of the vocabulary
    (`nucleus`), and the draw is one uniform u in [0, 1) against the cumulative masses (float64): the first token
    whose cumulative mass exceeds u times the total."""
    if params.greedy:
        return int(vocab.argmax(logits[None])[0])
    z = tempered(logits, params.temperature)  # [V]
    V = z.shape[0]
    if 0 < params.top_k < V:
        z = z.masked_fill(z < vocab.top_k(z[None], params.top_k)[0][0, -1], float("-inf"))
    if params.top_p < 1.0:
        tokens, p = nucleus(z, params.top_p)
    else:
        tokens, p = None, (z - torch.logsumexp(z, 0)).exp().double()  # [V]
    cdf = p.cumsum(0)
    u = torch.rand((), dtype=torch.float64, generator=generator)
    j = min(int(torch.searchsorted(cdf, u * cdf[-1], right=True)), cdf.shape[0] - 1)
    return int(tokens[j]) if tokens is not None else j


def target_choices(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None = None):
    """logits [m, V] -> the target's token at each of the m positions [m] (argmax, or one draw per position)."""
    if params.greedy:
        return vocab.argmax(logits)  # = logits.argmax(-1), a few times faster on CPU
    return torch.tensor([sample_token(row, params, generator) for row in logits], device=logits.device)


def draft_log_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """A drafter's logits [L, N] -> log-probs [L, N] processed as the target's are (temperature, top-k, top-p): the
    drafter's estimate of the law the target samples from, which is what a node's acceptance depends on under
    sampling (greedy: log_softmax, unchanged). Top-p is cut among each row's best `NUCLEUS_FIRST` tokens only (a
    row whose nucleus is wider keeps every token): only the tree's shape depends on these, never the output."""
    lp = torch.log_softmax(logits.float(), -1)
    if params.greedy:
        return lp
    z = lp / params.temperature
    N = z.shape[-1]
    if 0 < params.top_k < N:
        z = z.masked_fill(z < vocab.top_k(z, params.top_k)[0][:, -1:], float("-inf"))
    lp = torch.log_softmax(z, -1)
    if params.top_p < 1.0:
        vals, _ = vocab.top_k(lp, min(NUCLEUS_FIRST, N))  # [L, m] descending
        p = vals.exp().double()
        n = ((p.cumsum(-1) - p) < params.top_p).sum(-1, keepdim=True)  # [L, 1] tokens kept among the m
        least = vals.gather(-1, n - 1).masked_fill(n == vals.shape[-1], float("-inf"))  # wider nucleus: no cut
        lp = torch.log_softmax(lp.masked_fill(lp < least, float("-inf")), -1)
    return lp


def accept_walk(tokens: torch.Tensor, parents: torch.Tensor, choices) -> tuple[list[int], int]:
    """Walk from the root while the target's choice at the current node is one of its children.

    tokens [n], parents [n] (-1 = root) describe the tree; choices: the target's token at [root, nodes], as an
    [n + 1] tensor or a function row -> token called only on the rows the walk reaches (a sampling decoder draws
    there and nowhere else: draws at the other nodes would never be used). Returns (accepted node indices, root to
    leaf, in order; bonus token = the choice at the last accepted node).
    """
    children: dict[tuple[int, int], int] = {}
    for i, (tok, par) in enumerate(zip(tokens.tolist(), parents.tolist())):
        children.setdefault((par, tok), i)
    choice = choices if callable(choices) else choices.tolist().__getitem__
    path, node = [], -1
    while (node, (c := choice(node + 1))) in children:
        node = children[(node, c)]
        path.append(node)
    return path, c


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
