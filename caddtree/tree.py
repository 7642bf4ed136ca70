"""DDTree: the best-first draft tree from per-position marginals, and its attention mask. Pure tensor logic.

A node is a prefix (y_1..y_d) with weight Π q_i(y_i). The best tree of n nodes is the n highest-weight prefixes;
a lazy max-heap over (parent, depth, rank-among-siblings) pops them in non-increasing weight, parents before children,
so every prefix of the pop order is itself a valid (prefix-closed) tree. Node i of a Tree is the i-th pop.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

import torch

from caddtree import vocab

FIRST_K = 8  # tokens per position found up front: best-first trees rarely need more siblings


@dataclass
class Tree:
    tokens: torch.Tensor   # [n] long: the node's last token
    parents: torch.Tensor  # [n] long: parent node index, -1 = the root (last committed token)
    depths: torch.Tensor   # [n] long: 1 = child of the root
    log_weights: torch.Tensor  # [n] float: log Π q_i(y_i) of the node's prefix, non-increasing

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    @staticmethod
    def empty() -> "Tree":
        """The tree of no nodes (a plain step). One shared instance: its tensors hold nothing to change, and making
        four tensors costs ~15 µs a round cache-cold."""
        return EMPTY

    def prefix(self, n: int) -> "Tree":
        """The first n nodes in best-first order: the best tree of n nodes."""
        return Tree(self.tokens[:n], self.parents[:n], self.depths[:n], self.log_weights[:n])


_NONE = torch.zeros(0, dtype=torch.long)
EMPTY = Tree(_NONE, _NONE, _NONE, torch.zeros(0, dtype=torch.float64))


@dataclass
class SparseMarginals:
    """Per-position marginals [L, V] that are flat but for a few listed tokens per row (prompt lookup's votes): row i
    gives each of its listed tokens its own log-prob and every other token log_rest[i]. `build_tree` reads the top
    of each row from the list, without the top-k over the vocabulary a dense row needs (~0.15 ms a round over
    8 x 49k entries on this project's CPU, cache-cold after a verify)."""
    tokens: list[list[int]]        # [L][m_i] listed tokens of row i, log-prob descending
    log_probs: list[list[float]]   # [L][m_i] their log-probs, each above log_rest[i]
    log_rest: list[float]          # [L] the log-prob of every other token of row i
    vocab_size: int

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.log_rest), self.vocab_size

    def __getitem__(self, rows: slice) -> "SparseMarginals":
        """The first positions only (`marginals[:depth]`), as for a dense tensor."""
        if not isinstance(rows, slice):
            raise TypeError("SparseMarginals takes a slice of positions, e.g. [:depth]")
        return SparseMarginals(self.tokens[rows], self.log_probs[rows], self.log_rest[rows], self.vocab_size)

    def top_log_prob(self, d: int) -> float:
        """Row d's largest log-prob (= `top(d, 1)[0][0]`): its first listed token's, else the flat rest's."""
        return self.log_probs[d][0] if self.log_probs[d] else self.log_rest[d]

    def top(self, d: int, k: int) -> tuple[list[float], list[int]]:
        """Row d's best k tokens, descending: the listed ones, then the rest in token-id order (all tied)."""
        vals, toks = self.log_probs[d][:k], self.tokens[d][:k]
        if len(toks) < k:
            listed = set(self.tokens[d])
            rest = [t for t in range(min(self.vocab_size, k + len(listed))) if t not in listed][:k - len(toks)]
            vals, toks = vals + [self.log_rest[d]] * len(rest), toks + rest
        return vals, toks

    def dense(self) -> torch.Tensor:
        """The marginals as a [L, V] float32 tensor."""
        out = torch.tensor(self.log_rest, dtype=torch.float32)[:, None].repeat(1, self.vocab_size)
        for d, (toks, vals) in enumerate(zip(self.tokens, self.log_probs)):
            if toks:
                out[d, toks] = torch.tensor(vals, dtype=torch.float32)
        return out


def build_tree(log_probs: torch.Tensor | SparseMarginals, budget: int, stop=None) -> Tree:
    """log_probs [L, V] per-position marginals (dense, or `SparseMarginals`) -> the best-first tree of
    min(budget, reachable) nodes.

    stop(log_weight) -> bool, optional: called after each node with its log weight; True ends the build there (the
    caller knows no larger tree is worth having, e.g. `budget.TreeStop`). Each position's best FIRST_K tokens are
    found up front (dense rows: `vocab.top_k`, all positions in one call); a position needs more only when its
    siblings run past them, which small trees never do.
    """
    if budget < 1:
        raise ValueError(f"tree budget must be >= 1, got {budget}")
    L, V = log_probs.shape
    k = min(budget, V)
    if isinstance(log_probs, SparseMarginals):
        marg = log_probs[:budget]  # a tree of `budget` nodes is at most `budget` deep
        find = marg.top
        rows = [marg.top(d, min(k, FIRST_K)) for d in range(len(marg.log_rest))]
    else:
        lp = log_probs.detach().cpu()[:budget]

        def find(d: int, n: int):
            v, i = vocab.top_k(lp[d:d + 1], n)
            return v[0].tolist(), i[0].tolist()

        v, i = vocab.top_k(lp, min(k, FIRST_K))
        rows = list(zip(v.tolist(), i.tolist()))  # position -> (log-probs, tokens), sorted descending

    def top(d: int, need: int):
        """Position d's best `need` (at most k) tokens."""
        vals, toks = rows[d]
        if len(vals) < min(need, k):  # more siblings than found so far: search again, keep the order found
            v, i = find(d, min(k, max(need, 2 * len(vals))))
            seen = set(toks)
            more = [(a, b) for a, b in zip(v, i) if b not in seen][:len(v) - len(vals)]
            rows[d] = vals, toks = vals + [a for a, _ in more], toks + [b for _, b in more]
        return vals, toks

    tokens, parents, depths, weights = [], [], [], []
    # heap entry: (-log_weight, tie, parent_node, depth, rank, parent_log_weight)
    heap = [(-rows[0][0][0], 0, -1, 1, 0, 0.0)] if L > 0 else []
    tie = 1
    while heap and len(tokens) < budget:
        neg_w, _, parent, depth, rank, parent_w = heapq.heappop(heap)
        node = len(tokens)
        top_lp, top_tok = top(depth - 1, rank + 2)  # this node's token, and the next sibling's
        tokens.append(top_tok[rank])
        parents.append(parent)
        depths.append(depth)
        weights.append(-neg_w)
        if stop is not None and stop(-neg_w):
            break
        if rank + 1 < k:  # next sibling: same parent, next-best token at this depth
            heapq.heappush(heap, (-(parent_w + top_lp[rank + 1]), tie, parent, depth, rank + 1, parent_w))
            tie += 1
        if depth < len(rows):  # first child: best token at the next depth
            heapq.heappush(heap, (-(-neg_w + rows[depth][0][0]), tie, node, depth + 1, 0, -neg_w))
            tie += 1
    return Tree(torch.tensor(tokens, dtype=torch.long), torch.tensor(parents, dtype=torch.long),
                torch.tensor(depths, dtype=torch.long), torch.tensor(weights, dtype=torch.float64))


def ancestor_mask(parents: torch.Tensor) -> torch.Tensor:
    """parents [n] -> bool [n + 1, n + 1] over [root, nodes]: True where the row may attend (itself and ancestors).

    Vectorised over the nodes (one step per tree level, on the parents' device): every node's chain of ancestors is
    followed one level at a time, all nodes at once."""
    n = parents.shape[0]
    dev = parents.device
    mask = torch.eye(n + 1, dtype=torch.bool, device=dev)
    mask[:, 0] = True
    rows = torch.arange(1, n + 1, device=dev)
    parent_of = torch.cat([parents.new_full((1,), -1), parents])  # [n + 1] over [root, nodes]; the root's: -1
    up = parents  # [n]: each node's ancestor at the current level; -1 once past the root (column 0, already set)
    while bool((up >= 0).any()):
        mask[rows, up + 1] = True
        up = parent_of[up + 1]
    return mask


def verify_inputs(root: int, tree: Tree, ctx: int, device=None, dtype=torch.float32):
    """The target's verify input over [root, nodes] on top of a KV cache of `ctx` tokens.

    Returns input_ids [n + 1], position_ids [n + 1] (ctx + depth) and an additive float mask [n + 1, ctx + n + 1]
    (0 = attend, -inf = blocked): the whole past plus ancestors only. A float mask, not bool: HF eager attention
    silently mis-reads 4-D bool masks.
    """
    n = len(tree)
    ids = torch.cat([torch.tensor([root]), tree.tokens]).to(device)
    pos = (ctx + torch.cat([torch.zeros(1, dtype=torch.long), tree.depths])).to(device)
    # only the [n + 1, n + 1] tree block travels to the device; the past's columns are filled there
    tree_block = ancestor_mask(tree.parents).to(device)
    mask = torch.zeros(n + 1, ctx + n + 1, dtype=dtype, device=device)
    mask[:, ctx:].masked_fill_(~tree_block, float("-inf"))
    return ids, pos, mask
