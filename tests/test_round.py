"""One decoding round's wiring, checked against quantities recomputed independently of the engine.

- Policy: every CaDDTree round verifies exactly the tree size `choose_tree_size` picks on that round's marginals
  (captured from the drafter) at that round's ℓ, the verified nodes are the first n of the best-first tree, and the
  reported Φ / round time are the chosen tree's (one-stage drafter, and the gated two-stage path where the cheap stage
  is priced at `cost_model.cheap_draft_ms(ℓ)`).
- Drafter inputs: the feature rows a drafter receives over a generation are, row for row, one fresh forward's hidden
  states of the committed prefix (`drafter.py`'s round protocol), also after compaction of rejected branches.
"""
import numpy as np
import pytest
import torch

from caddtree import engine
from caddtree.accept import SamplingParams
from caddtree.budget import SpeculationGate, choose_tree_size
from caddtree.costmodel import fit_cost_model
from caddtree.drafter import Drafter, LookupMixtureDrafter, PromptLookupDrafter
from caddtree.engine import Decoder
from caddtree.tree import build_tree
from conftest import OracleDrafter, RandomDrafter, make_tiny_target, prompt

MAX_NEW = 48


def cost_model(cheap: bool = False, draft_ms=(1.0, 1.5)):
    """A profile with ℓ dependence and a plain step well below the masked n = 1 forward: tree sizes vary from round
    to round on the test drafters' marginals, 0 (a plain step) included."""
    meas = {"ns": [0, 1, 2, 4, 8, 16, 32], "ctxs": [8, 64],
            "verify_ms": [[10.0, 13.0, 13.5, 14.5, 16.5, 20.5, 28.5], [12.0, 15.5, 16.0, 17.2, 19.5, 24.0, 33.0]],
            "draft_ms": list(draft_ms), "overhead_ms": 0.2}
    if cheap:
        meas["cheap_draft_ms"] = [0.05, 0.08]
    return fit_cost_model(meas)


class Recording(Drafter):
    """Wraps a drafter: remembers each call's committed length and returned marginals, and every feature tensor."""

    def __init__(self, inner: Drafter):
        self.inner = inner
        self.target_layers = list(inner.target_layers)
        self.num_positions = inner.num_positions
        self.calls, self.features = [], []

    def reset(self, prompt_ids):
        self.calls, self.features = [], []
        self.inner.reset(prompt_ids)

    def propose(self, tokens, features):
        if features is not None:
            self.features.append(features.clone())
        out = self.inner.propose(tokens, features)
        self.calls.append((int(tokens.shape[0]), out))
        return out

    def skip(self, features):  # the speculation gate's plain round: no call, the features still kept
        if features is not None:
            self.features.append(features.clone())
        self.inner.skip(features)


class RecordingMix(LookupMixtureDrafter):
    """The two-stage drafter, remembering what each stage returned (per round: stage 1 always, stage 2 if run)."""

    def reset(self, prompt_ids):
        super().reset(prompt_ids)
        self.cheap_calls, self.rest_calls = [], []

    def propose_cheap(self, tokens):
        out = super().propose_cheap(tokens)
        self.cheap_calls.append((len(tokens), out))
        return out

    def propose_rest(self, tokens, features):
        out = super().propose_rest(tokens, features)
        self.rest_calls.append((int(tokens.shape[0]), out))
        return out


@pytest.fixture
def verified(monkeypatch):
    """Every tree the engine hands to the target's verify forward, in order."""
    seen = []
    real = engine.verify_tree

    def spy(target, cache, root, tree):
        seen.append(tree)
        return real(target, cache, root, tree)

    monkeypatch.setattr(engine, "verify_tree", spy)
    return seen


def rooms(out, max_new: int) -> list[int]:
    """Per round, the draft depth that can still be emitted (max_new_tokens - tokens so far - 1)."""
    done, res = 0, []
    for r in out.rounds:
        res.append(max_new - done - 1)
        done += r.emitted
    return res


def drafted_rounds(out, verified) -> list:
    """(round, room, verified tree) of each round that drafted, in order. The others verify an empty tree: rounds
    without room, and plain rounds of the speculation gate (on by default; its choices follow measured times)."""
    res = []
    for r, room, tree in zip(out.rounds, rooms(out, MAX_NEW), verified, strict=True):
        if room > 0 and r.drafted is not False:
            res.append((r, room, tree))
        else:
            assert len(tree) == 0 == r.tree_size
    return res


def check_round(r, room, log_probs, cost, verified_tree, draft_ms=None):
    """One round against the policy recomputed from scratch on its marginals."""
    full = build_tree(log_probs[:room], cost.max_nodes)
    choice = choose_tree_size(full.log_weights, cost, r.ctx, draft_ms=draft_ms)
    assert r.tree_size == choice.n == len(verified_tree), (r, choice, len(full))
    want = full.prefix(choice.n)
    assert torch.equal(verified_tree.tokens, want.tokens) and torch.equal(verified_tree.parents, want.parents)
    phi = float(np.exp(full.log_weights[:choice.n].numpy()).sum())
    assert r.predicted_phi == pytest.approx(phi, rel=1e-12, abs=1e-15)
    assert r.predicted_ms == pytest.approx(choice.predicted_ms, rel=1e-12)
    return choice.n, len(full)


@pytest.mark.parametrize("seed", range(3))
def test_each_round_verifies_the_policys_choice(seed, verified):
    target = make_tiny_target(seed, eos=None)
    cost = cost_model()
    drafters = [RandomDrafter(target.vocab_size, num_positions=5, seed=seed, sharpness=4.0),
                OracleDrafter(target, num_positions=5, seed=seed, miss_rate=0.4)]
    chosen, built = [], []
    for inner in drafters:
        rec = Recording(inner)
        verified.clear()
        # the speculation gate off: its choices follow measured times, and this test needs rounds that draft
        dec = Decoder(target, rec, method="caddtree", cost_model=cost, speculation_gate=False)
        out = dec.generate(prompt(seed, 10), MAX_NEW)
        drafted = drafted_rounds(out, verified)
        assert len(drafted) == len(rec.calls)
        for (r, room, tree), (length, lp) in zip(drafted, rec.calls):
            assert length == r.ctx + 1  # the round's ℓ is the committed length minus the root
            n, size = check_round(r, room, lp, cost, tree)
            chosen.append(n)
            built.append(size)
        assert all(r.tree_size == 0 and r.predicted_phi is None for r, room in zip(out.rounds, rooms(out, MAX_NEW))
                   if room <= 0)
    # the check has teeth: rounds that cut the tree short, plain steps and larger trees all occur
    assert any(0 < n < b for n, b in zip(chosen, built)) and 0 in chosen and max(chosen) >= 4, chosen


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("sampled", [False, True])
def test_gated_two_stage_rounds_verify_the_choice_of_the_stage_that_ran(seed, sampled, verified, monkeypatch):
    """Also where stage 1's best node cannot pay and the engine skips the build (`TreeStop.plain_only`): those
    rounds verify what the full build's choice is (a plain step); greedily and sampled (T = 1, node calibration off,
    so `choose_tree_size` on the raw weights is the reference)."""
    target = make_tiny_target(seed, eos=None)
    cost = cost_model(cheap=True)
    mix = RecordingMix(RandomDrafter(target.vocab_size, num_positions=4, seed=seed, sharpness=4.0),
                       PromptLookupDrafter(target.vocab_size, num_positions=4))
    dec = Decoder(target, mix, method="caddtree", cost_model=cost, calibrate_phi=False, speculation_gate=False)
    assert dec.gate is not None
    skipped, plain_only = [], engine.TreeStop.plain_only
    monkeypatch.setattr(engine.TreeStop, "plain_only", lambda self, w: skipped.append(plain_only(self, w)) or
                        skipped[-1])
    sampling = SamplingParams(temperature=1.0) if sampled else SamplingParams()
    stages = []
    for p in (prompt(seed, 16), torch.tensor([5, 6, 7, 8, 9, 5, 6, 7, 8, 9, 5, 6])):  # a repeating prompt: lookup hits
        verified.clear()
        out = dec.generate(p, MAX_NEW, sampling, seed=seed)
        drafted = drafted_rounds(out, verified)
        assert len(drafted) == len(mix.cheap_calls)
        assert sum(r.second_stage for r, _, _ in drafted) == len(mix.rest_calls)
        rest = iter(mix.rest_calls)
        for (r, room, tree), (length, cheap) in zip(drafted, mix.cheap_calls):
            assert length == r.ctx + 1
            if r.second_stage:
                length2, full = next(rest)
                assert length2 == length
                check_round(r, room, full, cost, tree)
            else:  # stage 1 alone, priced at its own draft cost
                check_round(r, room, cheap, cost, tree, draft_ms=cost.cheap_draft_ms(r.ctx))
            stages.append(r.second_stage)
    assert True in stages and False in stages, stages  # both paths covered
    assert True in skipped and False in skipped, skipped  # rounds with the build skipped, and with it built


# ------------------------------------------------------------------------------------------------- drafter inputs

class FeatureSink(Drafter):
    """Wraps a drafter; keeps every feature tensor it is handed and checks the protocol's row count per call."""

    def __init__(self, inner: Drafter, layers):
        self.inner, self.target_layers, self.num_positions = inner, list(layers), inner.num_positions
        self.features, self.last_len = [], 0

    def reset(self, prompt_ids):
        self.features, self.last_len = [], 0
        self.inner.reset(prompt_ids)

    def propose(self, tokens, features):
        self.features.append(features.clone())
        self.last_len = int(tokens.shape[0])
        assert sum(f.shape[0] for f in self.features) == self.last_len - 1
        return self.inner.propose(tokens, features)

    def skip(self, features):  # the speculation gate's plain round: these rows count towards the next proposal
        self.features.append(features.clone())
        self.inner.skip(features)


def fresh_features(target, layers, ids: list[int]) -> torch.Tensor:
    target.hidden_layers = list(layers)
    _, feats = target.forward(torch.tensor(ids), target.new_cache())
    return feats


def assert_same_features(got: torch.Tensor, ref: torch.Tensor, what: str):
    """fp32, float order only: tree-verify and one-row plain-step rows (masked attention, other matmul shapes) vs one
    prefill differ by at most ~1.2e-5 · (|x| + 1) seen here (residual-stream values up to ~30, i.e. ~20 ulps); a wrong
    row differs by O(1)."""
    err = ((got - ref).abs() / (ref.abs() + 1)).max().item()
    assert torch.allclose(got, ref, rtol=5e-5, atol=5e-5), f"{what}: features differ from a fresh forward ({err:.1e})"


@pytest.mark.parametrize("method", ["ddtree", "caddtree", "caddtree-skips"])
@pytest.mark.parametrize("seed", range(3))
def test_drafter_features_are_a_fresh_forward_of_the_committed_prefix(method, seed, monkeypatch):
    """caddtree-skips: the speculation gate keeps every third round plain (its own choices follow measured times),
    so rows of skipped rounds reach the drafter through `skip` for certain."""
    if method == "caddtree-skips":
        rounds = iter(range(10 ** 6))
        monkeypatch.setattr(SpeculationGate, "draft", lambda self: next(rounds) % 3 != 2)
    target = make_tiny_target(seed, eos=None)
    layers = [0, 1]
    kept = []  # rows the engine kept after each verify: some rounds must keep a non-leading set (real compaction)
    real = engine.commit_path

    def spy(*args):
        kept.append(real(*args))
        return kept[-1]

    monkeypatch.setattr(engine, "commit_path", spy)
    cost = cost_model()
    for inner in (RandomDrafter(target.vocab_size, num_positions=4, seed=seed, sharpness=2.0),
                  OracleDrafter(target, num_positions=4, seed=seed, miss_rate=0.5)):
        sink = FeatureSink(inner, layers)
        dec = Decoder(target, sink, method=method.split("-")[0], budget=12, cost_model=cost,
                      speculation_gate=method == "caddtree-skips")
        p = prompt(seed, 10)
        out = dec.generate(p, MAX_NEW)
        assert sum(r.tree_size > r.accepted for r in out.rounds) >= 3  # rejections, so the cache is compacted
        if method == "caddtree-skips":
            assert sum(r.drafted is False for r in out.rounds) >= 3
        got = torch.cat(sink.features)
        committed = p.tolist() + out.tokens
        ref = fresh_features(target, layers, committed[:-1])
        assert sink.last_len - 1 <= got.shape[0] <= ref.shape[0]  # rows of plain rounds after the last proposal too
        assert_same_features(got, ref[:got.shape[0]], f"{method} {type(inner).__name__}")
    assert any(not torch.equal(r, torch.arange(len(r))) for r in kept), "no round kept a non-leading row"


def test_two_stage_drafter_gets_the_features_of_skipped_rounds_too():
    """The gated path: the trained stage, skipped in some rounds, still sees every committed token's features once,
    equal to a fresh forward's."""
    target = make_tiny_target(4, eos=None)
    cost = cost_model(cheap=True, draft_ms=(6.0, 9.0))  # a costly second stage: the gate skips it in some rounds
    base = FeatureSink(RandomDrafter(target.vocab_size, num_positions=4, seed=4, sharpness=2.0), [0, 1])
    mix = LookupMixtureDrafter(base, PromptLookupDrafter(target.vocab_size, num_positions=4))
    dec = Decoder(target, mix, method="caddtree", cost_model=cost)
    p = prompt(4, 10)
    out = dec.generate(p, MAX_NEW)
    stages = [r.second_stage for r in out.rounds if r.second_stage is not None]
    assert True in stages and False in stages, stages
    got = torch.cat(base.features)
    ref = fresh_features(target, [0, 1], (p.tolist() + out.tokens)[:-1])
    assert got.shape[0] == base.last_len - 1
    assert_same_features(got, ref[:got.shape[0]], "two-stage")
