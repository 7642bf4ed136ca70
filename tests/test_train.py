"""Drafter training data: batched greedy generation must reproduce each prompt's own greedy decoding."""
import torch

from caddtree.train import greedy_batch
from tests.conftest import make_tiny_target, reference_greedy


def test_greedy_batch_matches_unbatched_greedy_and_features():
    target = make_tiny_target(seed=3, eos=None)  # no EOS: every response runs to the cap
    prompts = [[5, 9, 2, 7, 30, 11, 4], [8, 3], [12, 40, 41, 42, 6]]  # different lengths -> left padding
    layers = [0, 1]
    results, steps = greedy_batch(target, prompts, layers, max_new_tokens=10)
    assert steps == 10
    for x, (resp, feats) in zip(prompts, results):
        assert resp == reference_greedy(target, torch.tensor(x), 10)
        seq = torch.tensor([x + resp])
        with torch.no_grad():
            hs = target.model(seq, output_hidden_states=True).hidden_states
        want = torch.cat([hs[k + 1][0] for k in layers], dim=-1)  # [T, 2H]
        assert feats.shape == want.shape
        torch.testing.assert_close(feats[:-1], want[:-1], atol=1e-4, rtol=1e-4)
        assert not feats[-1].any()  # the last token is never context


def test_greedy_batch_stops_each_row_at_its_eos():
    target = make_tiny_target(seed=1, eos=1)
    prompts = [[5, 9, 2], [8, 3, 17, 22]]
    results, _ = greedy_batch(target, prompts, [0], max_new_tokens=40)
    for x, (resp, _) in zip(prompts, results):
        assert resp == reference_greedy(target, torch.tensor(x), 40)
