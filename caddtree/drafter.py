"""Drafter interface, and the training-free prompt-lookup drafter.

A drafter proposes, in one call, a distribution for each of the next L positions after the root (the last committed
token, which the target has not processed yet). The tree builder only sees these marginals.

Round protocol (the engine calls, per generation):
    drafter.reset(prompt_ids)                       # once, before the first round
    log_probs = drafter.propose(tokens, features)   # every round
where `tokens` [ℓ + 1] are all committed token ids (the last one is the root) and `features` [k, F] are the target
features (`Target.forward` with `hidden_layers = drafter.target_layers`) of the k tokens that entered the target's KV
cache since the previous call, i.e. positions ℓ-k .. ℓ-1 (the whole prompt minus root on the first call).
"""
from __future__ import annotations

import math

import torch


class Drafter:
    """Base class. `target_layers` are the target layer ids whose outputs the drafter reads (none: no features)."""
    target_layers: list[int] = []
    num_positions: int = 0  # L: positions proposed per round (the tree's maximum depth)

    def reset(self, prompt_ids: torch.Tensor) -> None:
        pass

    def propose(self, tokens: torch.Tensor, features: torch.Tensor | None) -> torch.Tensor:
        """tokens [ℓ + 1] long, features [k, F] or None -> log_probs [L, V] float32 (rows sum to 1 in prob space)."""
        raise NotImplementedError


class PromptLookupDrafter(Drafter):
    """n-gram match over the context (prompt-lookup decoding), expressed as per-position marginals.

    The longest suffix of the committed tokens (n = max_ngram .. min_ngram) that occurred earlier in the context is
    matched; each distinct continuation seen after an occurrence votes for the tokens that followed it. Position i's
    marginal puts mass `confidence` on the votes (shared by count, most recent match first on ties) and spreads the
    rest uniformly, so weights stay honest for the cost-aware budget: no match -> a near-zero-confidence draft.
    """

    def __init__(self, vocab_size: int, num_positions: int = 8, max_ngram: int = 3, min_ngram: int = 1,
                 confidence: float = 0.8, max_matches: int = 4):
        if not 0.0 < confidence < 1.0:
            raise ValueError("confidence must lie in (0, 1)")
        self.vocab_size, self.num_positions = vocab_size, num_positions
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self.confidence, self.max_matches = confidence, max_matches

    def _continuations(self, seq: list[int]) -> list[list[int]]:
        L = self.num_positions
        for n in range(self.max_ngram, self.min_ngram - 1, -1):
            if len(seq) <= n:
                continue
            suffix = seq[-n:]
            found = []
            for start in range(len(seq) - n - 1, -1, -1):  # most recent occurrence first
                if seq[start:start + n] == suffix:
                    found.append(seq[start + n:start + n + L])
                    if len(found) >= self.max_matches:
                        break
            if found:
                return found
        return []

    def propose(self, tokens: torch.Tensor, features: torch.Tensor | None = None) -> torch.Tensor:
        L, V = self.num_positions, self.vocab_size
        conts = self._continuations(tokens.tolist())
        floor = math.log((1.0 - self.confidence) / V)
        log_probs = torch.full((L, V), floor)
        for i in range(L):
            votes: dict[int, int] = {}
            for c in conts:
                if i < len(c):
                    votes[c[i]] = votes.get(c[i], 0) + 1
            if not votes:
                log_probs[i] = -math.log(V)
                continue
            total = sum(votes.values())
            for tok, cnt in votes.items():
                log_probs[i, tok] = math.log(self.confidence * cnt / total + (1.0 - self.confidence) / V)
        return log_probs
