import pytest
import torch

from caddtree.accept import SamplingParams, accept_walk, target_choices, target_probs


def test_walk_follows_target_choice():
    # root -> a(5) -> b(7); root -> c(6)
    tokens, parents = torch.tensor([5, 6, 7]), torch.tensor([-1, -1, 0])
    assert accept_walk(tokens, parents, torch.tensor([5, 7, 0, 9])) == ([0, 2], 9)
    assert accept_walk(tokens, parents, torch.tensor([6, 0, 3, 0])) == ([1], 3)
    assert accept_walk(tokens, parents, torch.tensor([8, 7, 0, 0])) == ([], 8)
    assert accept_walk(tokens[:0], parents[:0], torch.tensor([4])) == ([], 4)


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
