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
    matched; each distinct continuation seen after an occurrence votes for the tokens that followed it. Position i
    puts mass c_i on the votes (shared by count) and spreads the rest uniformly; no match -> a uniform marginal.

    c_i is calibrated online, because the cost-aware budget trusts these numbers: c_i is the observed rate at which
    the top vote at position i equalled the committed token, given that positions < i did (a Beta(prior) mean,
    starting at `confidence`). Each call checks the previous call's votes against the tokens committed since.
    The calibration only reshapes the tree; the output never depends on it (acceptance is the target's choice).
    """

    def __init__(self, vocab_size: int, num_positions: int = 8, max_ngram: int = 3, min_ngram: int = 1,
                 confidence: float = 0.8, max_matches: int = 4, prior_strength: float = 4.0):
        if not 0.0 < confidence < 1.0:
            raise ValueError("confidence must lie in (0, 1)")
        self.vocab_size, self.num_positions = vocab_size, num_positions
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self.confidence, self.max_matches, self.prior_strength = confidence, max_matches, prior_strength
        self.hits = [0] * num_positions    # top vote right at position i, given positions < i were right
        self.trials = [0] * num_positions
        self._pending: tuple[int, list[int | None]] | None = None  # (len(tokens) at the call, top vote per position)

    def calibrated(self, i: int) -> float:
        a = self.prior_strength
        return (self.hits[i] + a * self.confidence) / (self.trials[i] + a)

    def reset(self, prompt_ids: torch.Tensor) -> None:
        self._pending = None  # keep the calibration: it describes the drafter on this target, not one prompt

    def _score_pending(self, seq: list[int]) -> None:
        start, top = self._pending
        for i, tok in enumerate(top):
            if tok is None or start + i >= len(seq):
                break
            self.trials[i] += 1
            if seq[start + i] != tok:
                break
            self.hits[i] += 1

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
        seq = tokens.tolist()
        if self._pending is not None:
            self._score_pending(seq)
        conts = self._continuations(seq)
        log_probs = torch.full((L, V), -math.log(V))
        top: list[int | None] = []
        for i in range(L):
            votes: dict[int, int] = {}
            for c in conts:
                if i < len(c):
                    votes[c[i]] = votes.get(c[i], 0) + 1
            if not votes:
                top.append(None)
                continue
            conf = self.calibrated(i)
            total = sum(votes.values())
            log_probs[i] = math.log((1.0 - conf) / V)
            for tok, cnt in votes.items():
                log_probs[i, tok] = math.log(conf * cnt / total + (1.0 - conf) / V)
            top.append(max(votes, key=votes.get))  # ties: the most recent match's token (inserted first)
        self._pending = (len(seq), top)
        return log_probs
