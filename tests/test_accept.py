import pytest
import torch

from caddtree.accept import (SamplingParams, accept_walk, accepted_along, draft_log_probs, nucleus, sample_token,
                             target_choices, target_probs)


def test_walk_follows_target_choice():
    # root -> a(5) -> b(7); root -> c(6)
    tokens, parents = torch.tensor([5, 6, 7]), torch.tensor([-1, -1, 0])
    assert accept_walk(tokens, parents, torch.tensor([5, 7, 0, 9])) == ([0, 2], 9)
    assert accept_walk(tokens, parents, torch.tensor([6, 0, 3, 0])) == ([1], 3)
    assert accept_walk(tokens, parents, torch.tensor([8, 7, 0, 0])) == ([], 8)
    assert accept_walk(tokens[:0], parents[:0], torch.tensor([4])) == ([], 4)


def test_accepted_along_prices_a_tree_from_the_text_that_followed():
    # root -> a(5) -> b(7) -> d(2); root -> c(6)
    tokens, parents, depths = torch.tensor([5, 6, 7, 2]), torch.tensor([-1, -1, 0, 2]), torch.tensor([1, 1, 2, 3])
    assert accepted_along(tokens, parents, depths, [5, 7, 2, 9]) == 3
    assert accepted_along(tokens, parents, depths, [5, 7, 3, 9]) == 2
    assert accepted_along(tokens, parents, depths, [6, 7, 2, 9]) == 1
    assert accepted_along(tokens, parents, depths, [4, 5, 7, 2]) == 0
    assert accepted_along(tokens, parents, depths, [5, 7, 2]) is None  # d's outcome needs the token after it
    assert accepted_along(tokens, parents, depths, [5, 7], final=True) == 2  # the output ended there
    assert accepted_along(tokens[:0], parents[:0], depths[:0], [], final=True) == 0
    # a tree that was verified: the same count as the walk over the target's choices
    text = [5, 7, 1, 4]
    choices = torch.tensor([text[0]] + [text[d] for d in depths.tolist()])
    assert accepted_along(tokens, parents, depths, text) == len(accept_walk(tokens, parents, choices)[0])


def test_walk_accepts_token_ids_that_look_special():
    # token 0 (pad/bos/mask-like ids) is a real token: it must be accepted like any other
    tokens, parents = torch.tensor([0, 0]), torch.tensor([-1, 0])
    assert accept_walk(tokens, parents, torch.tensor([0, 0, 3])) == ([0, 1], 3)


# probabilities 0.2, 0.4, 0.1, 0.3 at tokens 0..3: by probability the order is 1, 3, 0, 2 and the cumulative masses
# are 0.4, 0.7, 0.9, 1.0 -- written out, not computed with caddtree's formula
PROBS = [0.2, 0.4, 0.1, 0.3]
LOGITS = torch.tensor([PROBS]).log()


def kept(p: torch.Tensor) -> list[int]:
    return [i for i, x in enumerate(p[0].tolist()) if x > 0]


@pytest.mark.parametrize("top_p,expect", [
    (0.35, [0.0, 1.0, 0.0, 0.0]),               # 0.4 >= 0.35: token 1 alone
    (0.39, [0.0, 1.0, 0.0, 0.0]),
    (0.41, [0.0, 4 / 7, 0.0, 3 / 7]),           # 0.4 < 0.41 <= 0.7: tokens 1, 3
    (0.69, [0.0, 4 / 7, 0.0, 3 / 7]),
    (0.71, [2 / 9, 4 / 9, 0.0, 3 / 9]),         # 0.7 < 0.71 <= 0.9: tokens 1, 3, 0
    (0.89, [2 / 9, 4 / 9, 0.0, 3 / 9]),
    (0.91, [0.2, 0.4, 0.1, 0.3]),               # 0.9 < 0.91: all four
])
def test_top_p_keeps_the_smallest_set_whose_mass_reaches_p(top_p, expect):
    """Top-p convention (caddtree.accept.target_probs): sort by probability, keep the smallest prefix whose mass
    reaches top_p (>= top_p), i.e. drop a token iff the mass of the tokens before it already reaches top_p; then
    renormalise. Each boundary (cumulative 0.4, 0.7, 0.9) is probed 0.01 below and above, so top-p keeping one token
    too many or one too few fails here (e.g. at 0.69 the kept set must be {1, 3}, not {1} or {1, 3, 0})."""
    p = target_probs(LOGITS, SamplingParams(temperature=1.0, top_p=top_p))
    assert kept(p) == [i for i, x in enumerate(expect) if x > 0]
    assert torch.allclose(p[0], torch.tensor(expect), atol=1e-6)


def test_top_p_exactly_reached_keeps_no_token_more():
    """Mass exactly p after the two most probable tokens (dyadic probabilities 1/2, 1/4, 1/8, 1/8, exact in float32):
    the kept set is those two; a rule that keeps a token while the mass before it is merely <= p keeps a third."""
    ln2 = torch.log(torch.tensor(2.0))
    logits = torch.stack([torch.tensor(0.0), -ln2, -2 * ln2, -2 * ln2])[None]
    assert torch.softmax(logits, -1)[0].tolist() == [0.5, 0.25, 0.125, 0.125]  # the boundary is exact, not rounded
    got = target_probs(logits, SamplingParams(temperature=1.0, top_p=0.75))[0].tolist()
    assert got == pytest.approx([2 / 3, 1 / 3, 0.0, 0.0])


@pytest.mark.parametrize("top_k,expect", [
    (1, [0.0, 1.0, 0.0, 0.0]), (2, [0.0, 4 / 7, 0.0, 3 / 7]), (3, [2 / 9, 4 / 9, 0.0, 3 / 9]),
    (4, PROBS), (9, PROBS),                     # k >= V: nothing dropped
])
def test_top_k_keeps_the_k_most_probable_tokens(top_k, expect):
    p = target_probs(LOGITS, SamplingParams(temperature=1.0, top_k=top_k))
    assert torch.allclose(p[0], torch.tensor(expect), atol=1e-6)


def test_temperature_then_top_k_then_top_p():
    """The order is temperature, top-k, top-p (HF's warper order), each step checked where another order differs."""
    # T = 0.5 squares the probabilities: 0.04, 0.16, 0.01, 0.09 (/ 0.30); top-p 0.8 then keeps tokens 1, 3 (mass
    # 0.25 / 0.30 = 0.833); at T = 1 it would keep 1, 3, 0 (0.7 < 0.8)
    p = target_probs(LOGITS, SamplingParams(temperature=0.5, top_p=0.8))
    assert torch.allclose(p[0], torch.tensor([0.0, 16 / 25, 0.0, 9 / 25]), atol=1e-6)
    p = target_probs(LOGITS, SamplingParams(temperature=0.5))
    assert torch.allclose(p[0], torch.tensor([4 / 30, 16 / 30, 1 / 30, 9 / 30]), atol=1e-6)
    # T = 2 takes square roots: top-p 0.65 keeps 1, 3, 0 (mass of 1, 3: (0.632 + 0.548) / 1.943 = 0.607 < 0.65);
    # at T = 1 it would keep 1, 3 (0.7 >= 0.65)
    p = target_probs(LOGITS, SamplingParams(temperature=2.0, top_p=0.65))
    r = torch.tensor([0.2, 0.4, 0.0, 0.3]).sqrt()
    assert torch.allclose(p[0], r / r.sum(), atol=1e-6)
    # top-k 3 first renormalises to 2/9, 4/9, 3/9: top-p 0.75 then keeps 1, 3 (7/9 >= 0.75); top-p before top-k
    # would keep 1, 3, 0 (0.7 < 0.75 of the full distribution)
    p = target_probs(LOGITS, SamplingParams(temperature=1.0, top_k=3, top_p=0.75))
    assert torch.allclose(p[0], torch.tensor([0.0, 4 / 7, 0.0, 3 / 7]), atol=1e-6)


def test_processed_distribution():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])  # softmax 0.644, 0.237, 0.087, 0.032; cumulative 0.644, 0.881, 0.968
    p = target_probs(logits, SamplingParams(temperature=1.0, top_k=2))
    assert p[0, 2:].sum() == 0 and torch.isclose(p.sum(), torch.tensor(1.0))
    p = target_probs(logits, SamplingParams(temperature=1.0, top_p=0.5))
    assert (p[0] > 0).tolist() == [True, False, False, False]  # top token alone already has mass >= 0.5
    p = target_probs(logits, SamplingParams(temperature=1.0, top_p=0.9))
    assert (p[0] > 0).tolist() == [True, True, True, False]  # 0.881 < 0.9 <= 0.968
    g = torch.Generator().manual_seed(0)
    assert target_choices(logits, SamplingParams(), g).item() == 0


@pytest.mark.parametrize("kwargs", [dict(temperature=-0.1), dict(top_p=0.0), dict(top_p=1.5), dict(top_k=-1)])
def test_bad_sampling_params(kwargs):
    with pytest.raises(ValueError):
        SamplingParams(**kwargs)


def test_walk_draws_only_on_the_rows_it_reaches():
    """A sampling decoder passes a function row -> token: it is asked for the root, then for each accepted node, and
    for nothing else (a draw at a node off the path would cost a sampling pass and never be used)."""
    tokens, parents = torch.tensor([5, 6, 7, 8]), torch.tensor([-1, -1, 0, 2])  # root -> 5 -> 7 -> 8; root -> 6
    asked = []
    table = {0: 5, 1: 7, 3: 2}  # rows: 0 root, 1 node 0 (5), 3 node 2 (7)

    def choose(row):
        asked.append(row)
        return table[row]
    assert accept_walk(tokens, parents, choose) == ([0, 2], 2)
    assert asked == [0, 1, 3]


@pytest.mark.parametrize("ties", [False, True])
def test_nucleus_keeps_what_target_probs_keeps(ties):
    """`nucleus` (what `sample_token` draws from) keeps exactly `target_probs`' support: random rows of 3000 logits
    from flat to peaky, so kept sets run from 1 token to thousands (past the first 64 and 256 it looks at), with
    logits on a coarse grid where `ties` (then the least probable kept value is shared by tokens on both sides of
    the mass boundary, and every one of them is kept)."""
    g = torch.Generator().manual_seed(1 + ties)
    sizes, tied = [], 0
    for trial in range(24):
        z = torch.randn(3000, generator=g) * (0.3 + 0.3 * trial)
        if ties:
            z = (z * 2).round() / 2
        z = z - z.max()
        for top_p in (0.5, 0.9, 0.95, 0.99):
            tokens, p = nucleus(z, top_p)
            want = target_probs(z[None], SamplingParams(temperature=1.0, top_p=top_p))[0]
            assert sorted(tokens.tolist()) == want.nonzero().flatten().tolist(), (trial, top_p)
            assert torch.allclose(p, (z - torch.logsumexp(z, 0)).exp().double()[tokens])
            sizes.append(len(tokens))
            tied += int((z == z[tokens].min()).sum()) > 1
    assert min(sizes) < 8 and max(sizes) > 1000 and any(64 < n < 256 for n in sizes)
    assert tied > 10 if ties else True


def test_sample_token_is_the_argmax_greedily_and_follows_the_seed():
    logits = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    assert sample_token(logits, SamplingParams()) == int(logits.argmax())
    params = SamplingParams(temperature=1.0, top_p=0.9)
    a = [sample_token(logits, params, torch.Generator().manual_seed(5)) for _ in range(3)]
    assert a[0] == a[1] == a[2]
    assert len({sample_token(logits, params, torch.Generator().manual_seed(s)) for s in range(50)}) > 10


def test_draft_log_probs_process_a_drafter_as_the_target_is_processed():
    """Greedy: the drafter's log_softmax, untouched. Sampling: the law the target would sample from these logits
    (temperature, top-k, top-p), where the kept set lies within the first 64 tokens; a wider one is not cut."""
    g = torch.Generator().manual_seed(0)
    peaky = torch.randn(3, 500, generator=g) * 4.0
    assert torch.equal(draft_log_probs(peaky, SamplingParams()), torch.log_softmax(peaky, -1))
    for params in (SamplingParams(0.7, 0, 0.9), SamplingParams(1.0, 20, 0.95), SamplingParams(1.3)):
        want = target_probs(peaky, params)
        assert params.top_p == 1.0 or (want > 0).sum(-1).max() < 64
        got = draft_log_probs(peaky, params).exp()
        assert torch.allclose(got, want, atol=1e-6)
    flat = torch.randn(2, 500, generator=g) * 0.1  # top-p 0.9 keeps ~450 tokens: nothing is cut
    got = draft_log_probs(flat, SamplingParams(0.8, 0, 0.9))
    assert torch.allclose(got, draft_log_probs(flat, SamplingParams(0.8)), atol=1e-6) and torch.isfinite(got).all()
