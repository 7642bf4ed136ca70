import pytest
import torch

from caddtree.accept import SamplingParams, accept_walk, accepted_along, target_choices, target_probs


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


def test_processed_distribution():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    p = target_probs(logits, SamplingParams(temperature=1.0, top_k=2))
    assert p[0, 2:].sum() == 0 and torch.isclose(p.sum(), torch.tensor(1.0))
    p = target_probs(logits, SamplingParams(temperature=1.0, top_p=0.5))
    assert (p[0] > 0).tolist() == [True, False, False, False]  # top token alone already has mass >= 0.5
    p = target_probs(logits, SamplingParams(temperature=1.0, top_p=0.9))
    full = torch.softmax(logits, -1)[0]
    assert (p[0] > 0).sum().item() == int((torch.cumsum(full, 0) - full < 0.9).sum())
    g = torch.Generator().manual_seed(0)
    assert target_choices(logits, SamplingParams(), g).item() == 0


@pytest.mark.parametrize("kwargs", [dict(temperature=-0.1), dict(top_p=0.0), dict(top_p=1.5), dict(top_k=-1)])
def test_bad_sampling_params(kwargs):
    with pytest.raises(ValueError):
        SamplingParams(**kwargs)
