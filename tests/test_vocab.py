import torch
from hypothesis import given, settings, strategies as st

from caddtree import vocab


@settings(max_examples=80, deadline=None)
@given(R=st.integers(1, 4), V=st.integers(1, 6000), k=st.integers(1, 40), levels=st.sampled_from([3, 50, 0]),
       seed=st.integers(0, 10_000))
def test_top_k_and_argmax_agree_with_torch(R, V, k, levels, seed):
    """Blocked search = torch's on any row, ties included (levels > 0: few distinct values, many ties)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(R, V, generator=g)
    if levels:
        x = torch.randint(0, levels, (R, V), generator=g).float()
    assert torch.equal(vocab.argmax(x), x.argmax(-1))  # the first maximal entry, as torch
    k = min(k, V)
    v, i = vocab.top_k(x, k)
    ref = torch.topk(x, k).values
    assert torch.equal(v, ref)                                 # the same values, sorted descending
    assert torch.equal(torch.gather(x, 1, i), v)               # indices point at them (any of tied entries)
    assert all(len(set(row)) == k for row in i.tolist())       # each entry once


def test_blocked_path_is_taken_on_a_vocabulary_sized_row():
    x = torch.randn(3, 49152, generator=torch.Generator().manual_seed(0))
    assert vocab._blocks(x, vocab.BLOCK) is not None and vocab._blocks(x[:, :1000], vocab.BLOCK) is None
    v, i = vocab.top_k(x, 8)
    assert torch.equal(i, torch.topk(x, 8).indices)
