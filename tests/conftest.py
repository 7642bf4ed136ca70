"""Shared fixtures: tiny randomly initialised Llama targets and test drafters (no download, fast)."""
import pytest
import torch

from caddtree.drafter import Drafter
from caddtree.kernels import pack_linears
from caddtree.target import Target

# Tiny matmuls: thread barriers cost far more than the math, and on a busy 2-core machine a second thread that waits
# for the other core made the suite 10x slower. Every test runs on one torch thread.
torch.set_num_threads(1)


def make_tiny_target(seed: int = 0, vocab: int = 64, layers: int = 2, max_pos: int = 512, eos: int | None = 1,
                     pack: bool = False) -> Target:
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_pos,
                      initializer_range=0.3,  # spread logits: no near-ties for argmax to flip on
                      bos_token_id=0, eos_token_id=eos, pad_token_id=0, attn_implementation="sdpa")
    model = LlamaForCausalLM(cfg).eval()
    model.generation_config.eos_token_id = eos
    packed = pack and pack_linears(model) > 0
    return Target(model=model, tokenizer=None, name=f"tiny-{seed}", fingerprint=f"tiny-{seed}", packed=packed)


@pytest.fixture
def tiny_target():
    return make_tiny_target()


def reference_greedy(target: Target, prompt: torch.Tensor, max_new_tokens: int) -> list[int]:
    """Plain greedy decoding without any cache: the ground truth every method must reproduce."""
    seq = prompt.tolist()
    out = []
    with torch.no_grad():
        for _ in range(max_new_tokens):
            tok = int(target.model(torch.tensor([seq])).logits[0, -1].argmax())
            out.append(tok)
            seq.append(tok)
            if tok in target.eos_ids:
                break
    return out


class RandomDrafter(Drafter):
    """Random marginals: exercises wide, shallow trees that the target mostly rejects."""

    def __init__(self, vocab: int, num_positions: int = 6, seed: int = 0, sharpness: float = 3.0):
        self.vocab_size, self.num_positions, self.sharpness = vocab, num_positions, sharpness
        self.gen = torch.Generator().manual_seed(seed)

    def propose(self, tokens, features):
        return torch.log_softmax(self.sharpness * torch.randn(self.num_positions, self.vocab_size,
                                                              generator=self.gen), dim=-1)


class OracleDrafter(Drafter):
    """Knows the target's greedy continuation, but hides it at a random rank now and then: deep accepted paths
    with occasional misses, so compaction and positions are exercised at every depth."""

    def __init__(self, target: Target, num_positions: int = 6, seed: int = 0, miss_rate: float = 0.25):
        self.target, self.vocab_size, self.num_positions = target, target.vocab_size, num_positions
        self.gen = torch.Generator().manual_seed(seed)
        self.miss_rate = miss_rate
        self.target_layers = [0]  # asks for features to exercise that path too

    def propose(self, tokens, features):
        assert features is not None and features.shape[0] >= 1
        seq, lp = tokens.tolist(), []
        with torch.no_grad():
            for _ in range(self.num_positions):
                logits = self.target.model(torch.tensor([seq])).logits[0, -1]
                best = int(logits.argmax())
                boost = torch.zeros_like(logits)
                if torch.rand(1, generator=self.gen).item() >= self.miss_rate:
                    boost[best] = 8.0  # usually confident and right; otherwise the greedy token is at a random rank
                lp.append(torch.log_softmax(torch.randn(logits.shape, generator=self.gen) + boost, dim=-1))
                seq.append(best)
        return torch.stack(lp)


# cost measurements of a made-up machine (`fit_cost_model`'s input): a node adds ~0.5-1 ms to a 5-6 ms step
TOY_COSTS = {"ns": [0, 1, 2, 4, 8, 16], "ctxs": [16, 256], "draft_ms": [1.0, 1.2], "overhead_ms": 0.2,
             "verify_ms": [[5, 6, 6.5, 7, 8, 10], [6, 7, 7.5, 8, 9.5, 12]]}


def prompt(seed: int, length: int = 12, vocab: int = 64) -> torch.Tensor:
    return torch.randint(2, vocab, (length,), generator=torch.Generator().manual_seed(seed))


class FeatureLog(RandomDrafter):
    """Random marginals; remembers the feature rows it was given (a trained drafter must see each exactly once)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.target_layers, self.rows = [0], 0

    def reset(self, prompt_ids):
        self.rows = 0

    def propose(self, tokens, features):
        self.rows += 0 if features is None else features.shape[0]
        assert self.rows == tokens.shape[0] - 1, "features of every committed token but the root, exactly once"
        return super().propose(tokens, features)

    def skip(self, features):  # a round without a draft: the features still count
        self.rows += 0 if features is None else features.shape[0]


# Hypothesis: the same examples on every run (CI runs `make test`), so a failure is reproducible and a pass is not luck
# of the draw. `derandomize` seeds each test from its own source and leaves the example database out. Explore with
# fresh random examples by choice: HYPOTHESIS_PROFILE=random make test (or any registered profile's name).
def _hypothesis_profiles():
    import os

    from hypothesis import settings
    settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
    settings.register_profile("random", derandomize=False, deadline=None, print_blob=True)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


_hypothesis_profiles()
