import itertools
import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

from caddtree.tree import SparseMarginals, Tree, ancestor_mask, build_tree, verify_inputs


def brute_force_weights(log_probs: torch.Tensor, n: int) -> list[float]:
    """All prefixes of every depth, sorted by weight: the top n weights of the best n-node tree."""
    L, V = log_probs.shape
    ws = []
    for d in range(1, L + 1):
        for pre in itertools.product(range(V), repeat=d):
            ws.append(sum(log_probs[i, t].item() for i, t in enumerate(pre)))
    return sorted(ws, reverse=True)[:n]


@settings(max_examples=60, deadline=None)
@given(L=st.integers(1, 3), V=st.integers(2, 4), n=st.integers(1, 30), seed=st.integers(0, 10_000))
def test_build_tree_matches_brute_force(L, V, n, seed):
    g = torch.Generator().manual_seed(seed)
    lp = torch.log_softmax(2 * torch.randn(L, V, generator=g, dtype=torch.float64), -1)
    tree = build_tree(lp, n)
    expect = brute_force_weights(lp, n)
    assert len(tree) == len(expect)
    assert torch.allclose(tree.log_weights, torch.tensor(expect, dtype=torch.float64), atol=1e-9)
    assert_tree_of(tree, lp, atol=1e-9)


def assert_tree_of(tree, lp: torch.Tensor, atol: float) -> None:
    """Each node's weight is its parent's weight plus its own token's log-prob under lp [L, V], parents come first,
    and no two siblings share a token (every node is a distinct prefix)."""
    for i in range(len(tree)):
        p, d, t = tree.parents[i].item(), tree.depths[i].item(), tree.tokens[i].item()
        parent_w = 0.0 if p < 0 else tree.log_weights[p].item()
        assert p < i and (p < 0 and d == 1 or p >= 0 and tree.depths[p].item() == d - 1)
        assert math.isclose(tree.log_weights[i].item(), parent_w + lp[d - 1, t].item(), abs_tol=atol)
    pairs = list(zip(tree.parents.tolist(), tree.tokens.tolist()))
    assert len(set(pairs)) == len(pairs)


def test_build_tree_stop_ends_the_build_at_that_node():
    lp = torch.log_softmax(torch.randn(4, 10, generator=torch.Generator().manual_seed(2)), -1)
    seen = []
    tree = build_tree(lp, 30, stop=lambda w: seen.append(w) or len(seen) == 7)
    full = build_tree(lp, 30)
    assert len(tree) == 7 and torch.equal(tree.tokens, full.prefix(7).tokens)
    assert torch.allclose(torch.tensor(seen, dtype=torch.float64), full.log_weights[:7])


def test_build_tree_rejects_bad_budget():
    with pytest.raises(ValueError, match="budget"):
        build_tree(torch.zeros(2, 3), 0)


def test_prefix_is_best_smaller_tree():
    lp = torch.log_softmax(torch.randn(4, 10, generator=torch.Generator().manual_seed(1)), -1)
    big = build_tree(lp, 40)
    for n in (1, 5, 17):
        small = build_tree(lp, n)
        assert torch.equal(big.prefix(n).tokens, small.tokens) and torch.equal(big.prefix(n).parents, small.parents)


def ancestors(parents: list[int], i: int) -> set[int]:
    out = set()
    while i >= 0:
        out.add(i)
        i = parents[i]
    return out


@settings(max_examples=40, deadline=None)
@given(L=st.integers(1, 5), V=st.integers(2, 6), n=st.integers(1, 40), seed=st.integers(0, 10_000))
def test_mask_and_positions_are_ancestor_only(L, V, n, seed):
    lp = torch.log_softmax(torch.randn(L, V, generator=torch.Generator().manual_seed(seed)), -1)
    tree = build_tree(lp, n)
    m = ancestor_mask(tree.parents)
    par = tree.parents.tolist()
    for row in range(len(tree) + 1):
        allowed = {0} | ({c + 1 for c in ancestors(par, row - 1)} if row > 0 else set())
        assert {j for j in range(len(tree) + 1) if m[row, j]} == allowed
    ctx = 7
    ids, pos, mask = verify_inputs(42, tree, ctx)
    assert ids[0].item() == 42 and torch.equal(ids[1:], tree.tokens)
    assert torch.equal(pos, ctx + torch.cat([torch.zeros(1, dtype=torch.long), tree.depths]))
    assert mask.shape == (len(tree) + 1, ctx + len(tree) + 1)
    assert (mask[:, :ctx] == 0).all()  # the whole past is visible
    assert torch.equal(mask[:, ctx:] == 0, m) and torch.isinf(mask[:, ctx:][~m]).all()


def test_empty_tree():
    t = Tree.empty()
    assert len(t) == 0 and ancestor_mask(t.parents).shape == (1, 1)


def test_build_tree_on_a_large_vocabulary_matches_full_top_k(monkeypatch):
    """Blocked top-k up front, more siblings on demand (budget 40 > FIRST_K): the same tree as taking every position's
    full top-k with torch."""
    import caddtree.tree as tree_mod
    lp = torch.log_softmax(torch.randn(3, 5000, generator=torch.Generator().manual_seed(3)), -1)
    lp[0] = torch.log_softmax(torch.zeros(5000), -1) + 0.1 * lp[0]  # flat first position: many siblings
    fast = build_tree(lp, 40)
    monkeypatch.setattr(tree_mod, "FIRST_K", 10**6)
    monkeypatch.setattr(tree_mod.vocab, "top_k", lambda x, k: torch.topk(x, k, dim=-1))
    ref = build_tree(lp, 40)
    assert (fast.depths == 1).sum() > 8  # past the first 8 found up front
    for a, b in ((fast.tokens, ref.tokens), (fast.parents, ref.parents), (fast.log_weights, ref.log_weights)):
        assert torch.equal(a, b)


def test_build_tree_siblings_stay_distinct_on_tied_rows():
    """A flat row (e.g. prompt lookup without a vote) is all ties: extending a position's top-k must not repeat a
    token already drafted there."""
    tree = build_tree(torch.full((3, 49152), -10.8), 64)
    first = tree.tokens[tree.depths == 1].tolist()
    assert len(tree) == 64 and len(first) == len(set(first)) > 8


@settings(max_examples=80, deadline=None)
@given(L=st.integers(1, 5), V=st.integers(2, 40), n=st.integers(1, 40), seed=st.integers(0, 10_000))
def test_build_tree_on_sparse_marginals_matches_their_dense_form(L, V, n, seed):
    """Listed tokens over a flat rest (prompt lookup's marginals): the tree read from the list has the dense law's
    best weights and is a tree of that law (`assert_tree_of`)."""
    g = torch.Generator().manual_seed(seed)
    tokens, log_probs, rest = [], [], []
    for _ in range(L):
        m = int(torch.randint(0, min(V, 4) + 1, (1,), generator=g))
        toks = torch.randperm(V, generator=g)[:m].tolist()
        mass = torch.rand(m + 1, generator=g, dtype=torch.float64) + 0.05
        mass = mass / mass.sum()  # the listed tokens' shares, and the rest's spread over the others
        r = math.log(mass[-1].item() / (V - m)) if m < V else -50.0
        lp = sorted((math.log(mass[j].item() + math.exp(r)) for j in range(m)), reverse=True)
        tokens.append(toks), log_probs.append(lp), rest.append(r)
    sparse = SparseMarginals(tokens, log_probs, rest, V)
    dense = sparse.dense().double()
    assert dense.shape == (L, V) and torch.equal(sparse[:2].dense(), sparse.dense()[:2])
    tree, ref = build_tree(sparse, n), build_tree(dense, n)
    assert len(tree) == len(ref)
    assert torch.allclose(tree.log_weights, ref.log_weights, atol=1e-5)
    assert_tree_of(tree, dense, atol=1e-5)


def test_sparse_marginals_take_only_a_slice():
    with pytest.raises(TypeError, match="slice"):
        SparseMarginals([[1]], [[-0.1]], [-9.0], 100)[0]
