"""Drafter training data: batched greedy generation must reproduce each prompt's own greedy decoding."""
import pytest
import torch

from caddtree.train.evaluate import greedy_batch
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


def test_token_archive_rebuilds_the_shards_with_their_features(tmp_path):
    """save_tokens keeps only token ids; load_tokens recomputes the features, which match the generated ones (bf16),
    resumes shard by shard, and refuses another target's archive."""
    import json

    from caddtree.dflash import default_target_layers
    from caddtree.errors import CaddtreeError
    from caddtree.train.data import load_data, load_tokens, save_tokens
    tg = make_tiny_target(0)
    layers = default_target_layers(tg.config.num_hidden_layers)
    tg.hidden_layers = layers
    src = tmp_path / "src"
    (src / "data").mkdir(parents=True)
    (src / "data" / "meta.json").write_text(json.dumps({"target": tg.name, "fingerprint": tg.fingerprint,
                                                        "target_layers": layers}))
    g = torch.Generator().manual_seed(0)
    for k in range(2):
        rec = {"tokens": [], "prompt_len": [], "feats": [], "source": [], "start": 4 * k, "count": 4}
        for i in range(3):
            toks = torch.randint(0, tg.vocab_size, (10 + 5 * i,), generator=g, dtype=torch.int32)
            _, f = tg.forward(toks.long(), tg.new_cache())
            f = f.clone()
            f[-1] = 0
            rec["tokens"].append(toks), rec["prompt_len"].append(4), rec["feats"].append(f.to(torch.bfloat16))
            rec["source"].append(f"set{i}")
        torch.save(rec, src / "data" / f"shard_{k:05d}.pt")
    arch = tmp_path / "tokens.npz"
    assert save_tokens(src, arch) == 6
    dst = tmp_path / "dst"
    load_tokens(tg, arch, dst, log=lambda line: None)
    a, b = load_data(src), load_data(dst)
    assert len(a) == len(b) == 6
    for (ta, pa, fa), (tb, pb, fb) in zip(a, b):
        assert torch.equal(ta, tb) and pa == pb and torch.allclose(fa.float(), fb.float(), atol=1e-2, rtol=1e-2)
    assert torch.load(dst / "data" / "shard_00001.pt", weights_only=False)["start"] == 4
    (dst / "data" / "shard_00001.pt").unlink()  # resume: only the missing shard is rebuilt
    done = []
    load_tokens(tg, arch, dst, log=lambda line: done.append(json.loads(line)["shard"]))
    assert done == [1]
    other = make_tiny_target(1)
    other.fingerprint = "other-model"
    with pytest.raises(CaddtreeError, match="load it with that target"):
        load_tokens(other, arch, tmp_path / "x", log=print)


def test_training_prompts_come_from_training_sets_only_and_broken_files_fail_in_one_line(tmp_path):
    import json

    from caddtree.errors import CaddtreeError
    from caddtree.train.data import train_prompts
    d = tmp_path / "data"
    files = {"gsm8k/train.jsonl": [{"question": "G"}],
             "gpteacher/Codegen/codegen-instruct.json": [{"instruction": "C", "input": "x"}],
             "gpteacher/Roleplay/roleplay-simple-deduped-roleplay-instruct.json": [{"instruction": "R"}],
             "alpaca/alpaca_data_cleaned_1000.json": [{"instruction": "A"}],
             "codealpaca/code_alpaca_2k.json": [{"instruction": "K"}],
             "mbpp/mbpp.jsonl": [{"task_id": t, "text": f"M{t}", "test_list": ["assert 1"]} for t in (3, 11, 600)]}
    for rel, recs in files.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        body = json.dumps(recs) if rel.endswith(".json") else "".join(json.dumps(r) + "\n" for r in recs)
        (d / rel).write_text(body)
    got = sorted(train_prompts(d))
    assert [s for s, _ in got] == sorted(["gsm8k", "codegen", "roleplay", "alpaca", "codealpaca", "mbpp", "mbpp"])
    assert {p for s, p in got if s == "mbpp"} == {"M3\nYour code should pass this test:\nassert 1",
                                                  "M600\nYour code should pass this test:\nassert 1"}  # not 11: test
    assert ("codegen", "C\n\nx") in got
    (d / "mbpp/mbpp.jsonl").write_text('{"task_id": 3}\n')
    with pytest.raises(CaddtreeError, match="lacks a usable field"):
        train_prompts(d)
    (d / "gsm8k/train.jsonl").write_text("{oops\n")
    with pytest.raises(CaddtreeError, match="gsm8k/train.jsonl line 1 cannot be read"):
        train_prompts(d)


def test_train_config_takes_every_training_option_of_the_command_line():
    """TrainConfig.from_args carries each train-drafter option that has a field (a renamed option would fail here,
    not fall back to the field's default unnoticed); only log_every has no option."""
    import argparse
    import dataclasses

    from caddtree.train.command import add_train_parser
    from caddtree.train.config import TrainConfig
    ap = argparse.ArgumentParser()
    add_train_parser(ap.add_subparsers())
    args = ap.parse_args(["train-drafter", "--lr", "0.02", "--draft-vocab", "100", "--init-from", "d", "--gamma", "3"])
    cfg = TrainConfig.from_args(args)
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    assert names - set(vars(args)) == {"log_every"}
    assert all(getattr(cfg, n) == getattr(args, n) for n in names - {"log_every"})
    assert (cfg.lr, cfg.draft_vocab, cfg.init_from, cfg.gamma, cfg.log_every) == (0.02, 100, "d", 3.0, 10)
