"""Benchmark harness: dataset loaders on a fake data dir, method parsing, resume without duplicates, summary and
oracle on synthetic records, and a quick end-to-end run on a tiny target (exact match at temperature 0)."""
import gzip
import json
import sys

import numpy as np
import pytest
import torch

from caddtree.bench import command as bench_command
from caddtree.bench import methods as bench_methods
from caddtree.bench import peers as bench_peers
from caddtree.bench import plots as bench_plots
from caddtree.bench import records as bench_records
from caddtree.bench import report as bench_report
from caddtree.bench import runner as bench_runner
from caddtree.bench import stats as bench_stats
from caddtree.accept import SamplingParams
from caddtree.costmodel import CostModel, check_cost_model, fit_cost_model
from caddtree.datasets import DATASETS, MATH_SUFFIX, load_prompts
from caddtree.drafter import LookupMixtureDrafter, PromptLookupDrafter
from caddtree.errors import CaddtreeError
from conftest import TOY_COSTS, OracleDrafter, make_tiny_target

MEAS = TOY_COSTS | {"cheap_draft_ms": [0.1, 0.1]}  # the mix drafter runs gated


def _jsonl(path, recs):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))


@pytest.fixture
def data_dir(tmp_path):
    d = tmp_path / "data"
    _jsonl(d / "math500/test.jsonl", [{"problem": "1+1?", "unique_id": "a/1.json"}, {"problem": "2+2?",
                                                                                     "unique_id": "a/2.json"}])
    _jsonl(d / "gsm8k/test.jsonl", [{"question": "Q1", "answer": "#### 1"}, {"question": "Q2", "answer": "#### 2"}])
    _jsonl(d / "aime2025/aime25.jsonl", [{"prompt": "Find x.\nPlease reason step by step, and put your final answer "
                                                    "within \\boxed{}", "answer": 3}])
    (d / "humaneval").mkdir()
    with gzip.open(d / "humaneval/HumanEval.jsonl.gz", "wt") as f:
        f.write(json.dumps({"task_id": "HumanEval/0", "prompt": "def f(x):\n"}) + "\n")
    _jsonl(d / "mbpp/mbpp.jsonl", [{"task_id": t, "text": f"Task {t}.", "test_list": [f"assert f({t})"]}
                                   for t in (5, 11, 12)])
    _jsonl(d / "livecodebench/livecodebench_v5.jsonl", [{"question_id": "abc1", "prompt": "LCB prompt"}])
    _jsonl(d / "mt_bench/question.jsonl", [{"question_id": 81, "category": "writing", "turns": ["T1", "T2"]}])
    (d / "alpaca_eval/text_davinci_003").mkdir(parents=True)
    (d / "alpaca_eval/text_davinci_003/model_outputs.json").write_text(json.dumps(
        [{"instruction": "Say hi", "output": "hi"}, {"instruction": "Say bye", "output": "bye"}]))
    return d


def test_loaders_parse_each_format(data_dir, monkeypatch):
    got = {name: load_prompts(name, 5, data_dir=data_dir) for name in DATASETS}
    assert got["math500"] == [{"id": "a/1.json", "prompt": "1+1?" + MATH_SUFFIX},
                              {"id": "a/2.json", "prompt": "2+2?" + MATH_SUFFIX}]
    assert got["gsm8k"][1] == {"id": 1, "prompt": "Q2" + MATH_SUFFIX}
    assert got["aime25"] == [{"id": 0, "prompt": "Find x." + MATH_SUFFIX}]  # the suffix is not doubled
    assert got["humaneval"][0]["id"] == "HumanEval/0" and "def f(x):" in got["humaneval"][0]["prompt"]
    assert [p["id"] for p in got["mbpp"]] == [11, 12] and "assert f(11)" in got["mbpp"][0]["prompt"]
    assert got["livecodebench"] == [{"id": "abc1", "prompt": "LCB prompt"}]
    assert got["mt_bench"] == [{"id": 81, "prompt": "T1", "turns": ["T1", "T2"]}]
    assert [p["prompt"] for p in got["alpaca"]] == ["Say hi", "Say bye"]
    assert load_prompts("gsm8k", 1, data_dir=data_dir) == got["gsm8k"][:1]  # first n, deterministic
    monkeypatch.setenv("CADDTREE_DATA", str(data_dir))
    assert load_prompts("alpaca", 1) == got["alpaca"][:1]
    monkeypatch.setenv("CADDTREE_DATA", str(data_dir / "nope"))
    with pytest.raises(CaddtreeError, match="CADDTREE_DATA"):
        load_prompts("alpaca", 1)
    with pytest.raises(CaddtreeError, match="unknown dataset"):
        load_prompts("nope", 1, data_dir=data_dir)


def test_broken_data_files_are_one_line_errors(data_dir):
    """A truncated copy or the wrong file: one line naming the file (and line), never a JSON traceback."""
    (data_dir / "gsm8k/test.jsonl").write_text('{"question": "Q1"}\n{"question": \n')
    with pytest.raises(CaddtreeError, match=r"gsm8k/test.jsonl line 2 cannot be read \(JSONDecodeError"):
        load_prompts("gsm8k", 1, data_dir=data_dir)
    (data_dir / "humaneval/HumanEval.jsonl.gz").write_bytes(b"not gzip")
    with pytest.raises(CaddtreeError, match="HumanEval.jsonl.gz.* cannot be read"):
        load_prompts("humaneval", 1, data_dir=data_dir)
    _jsonl(data_dir / "math500/test.jsonl", [{"question": "a gsm8k record"}])
    with pytest.raises(CaddtreeError, match="math500: a record of .* lacks a usable field .*'problem'"):
        load_prompts("math500", 1, data_dir=data_dir)
    (data_dir / "alpaca_eval/text_davinci_003/model_outputs.json").write_text('{"instruction": "not a list"}')
    with pytest.raises(CaddtreeError, match="does not hold a list of records"):
        load_prompts("alpaca", 1, data_dir=data_dir)


def test_parse_methods():
    assert bench_methods.parse_methods("ar,ddtree:8,16,32,caddtree,lookup-ddtree:4,8,hf") == [
        "ar", "ddtree:8", "ddtree:16", "ddtree:32", "caddtree", "lookup-ddtree:4", "lookup-ddtree:8", "hf"]
    assert bench_methods.parse_methods("caddtree@cd0.5,ar,ar") == ["caddtree@cd0.5", "ar"]
    assert bench_methods.parse_methods("mix-caddtree,dflash-ddtree:4,8,mix-caddtree@cv2") == [
        "mix-caddtree", "dflash-ddtree:4", "dflash-ddtree:8", "mix-caddtree@cv2"]
    assert bench_methods.parse_methods("caddtree@nogate,caddtree@predgate") == ["caddtree@nogate", "caddtree@predgate"]
    assert bench_methods.parse_methods("caddtree@passes,caddtree@convex,caddtree@mono") == [
        "caddtree@passes", "caddtree@convex", "caddtree@mono"]
    for bad in ("ar,8", "ddtree", "ddtree:0", "nope", "ar@cd2", "caddtree@x", "foo-caddtree", "mix-ar",
                "ddtree@predgate:4"):
        with pytest.raises(CaddtreeError):
            bench_methods.parse_methods(bad)


def test_fullbuild_variant_prices_every_round_at_the_full_budget_bookkeeping():
    """caddtree@fullbuild: the overhead as priced before its per-node part (the full-budget tree's bookkeeping on
    every round), from the same profile; a profile without the two sizes is refused with one line."""
    meas = {**MEAS, "overhead_ms": [0.1, 0.15], "overhead_node_ms": 0.02, "overhead_sizes": [8, 16],
            "overhead_by_size_ms": [[0.26, 0.42], [0.31, 0.47]]}
    assert "caddtree@fullbuild" in bench_methods.parse_methods("caddtree@fullbuild")
    change = bench_methods.full_build_overhead(meas)
    m = fit_cost_model({**meas, **change})
    assert m.overhead_node == 0.0 and np.allclose(m.overhead, [0.42, 0.47])
    with pytest.raises(CaddtreeError, match="two tree sizes"):
        bench_methods.full_build_overhead(MEAS)


def test_oneover_variant_prices_the_plain_step_at_a_tree_rounds_overhead():
    """caddtree@oneover: the same profile refitted without a plain step's own overhead (every round at o, as before
    it), to compare the two pricings in one run; perturbed copies keep o_plain."""
    meas = {**MEAS, "overhead_ms": [0.5, 0.6], "overhead_plain_ms": [0.1, 0.1]}
    assert "caddtree@oneover" in bench_methods.parse_methods("caddtree@oneover")
    m = fit_cost_model(meas)
    one = fit_cost_model({**meas, **bench_methods.REFITS["oneover"]})
    assert one.overhead_plain is None and np.allclose(m.overhead_plain, [0.1, 0.1], atol=1e-4)
    assert one.plain_round_ms(16) == pytest.approx(m.plain_round_ms(16) + 0.5 - 0.1, abs=1e-4)
    assert np.allclose(bench_methods.perturb_cost_model(m, 2.0, 1.0).overhead_plain, m.overhead_plain)


def test_perturbed_cost_model_is_valid_and_scaled():
    m = fit_cost_model(MEAS)
    for (cd, cv) in bench_methods.PERTURB.values():
        p = bench_methods.perturb_cost_model(m, cd, cv)
        assert check_cost_model(p) is None
        assert p.draft_ms(100) == pytest.approx(cd * m.draft_ms(100))
        assert p.verify_ms(0, 16) == m.verify_ms(0, 16) and p.verify_ms(1, 16) == m.verify_ms(1, 16)
        assert p.verify_ms(16, 16) - p.verify_ms(1, 16) == pytest.approx(cv * (m.verify_ms(16, 16) - m.verify_ms(1, 16)))


def _rec(ds, method, pid, ms, new=10, rounds=5, sizes=(), match=True):
    return {"dataset": ds, "method": method, "prompt_id": pid, "config": "c", "ms_per_token": ms, "new_tokens": new,
            "rounds": rounds, "tree_sizes": list(sizes), "match_ar": match}


def test_summary_and_oracle_on_synthetic_records(tmp_path):
    recs = []
    for pid in ("0", "1", "2"):
        recs += [_rec("a", "ar", pid, 30.0, rounds=10, sizes=[0] * 10), _rec("a", "ddtree:8", pid, 20.0, sizes=[8] * 5),
                 _rec("a", "ddtree:16", pid, 15.0 + int(pid), sizes=[16] * 5),
                 _rec("a", "caddtree", pid, 14.0, sizes=[4, 12, 12, 12, 10], match=pid != "2"),
                 _rec("b", "ar", pid, 10.0), _rec("b", "ddtree:8", pid, 12.0), _rec("b", "ddtree:16", pid, 11.0),
                 _rec("b", "caddtree", pid, 11.5), _rec("b", "caddtree@passes", pid, 12.1)]
    recs.append({"dataset": "a", "method": "llamacpp", "prompt_id": "0", "config": "c", "skipped": "not installed"})
    s = bench_stats.summarize(recs)
    row = {(r["dataset"], r["method"]): r for r in s["rows"]}
    assert row[("a", "ddtree:16")]["ms_per_token"] == 16.0  # median of 15, 16, 17
    assert row[("a", "caddtree")]["speedup"] == pytest.approx(30 / 14)
    assert row[("a", "ddtree:8")]["tau"] == pytest.approx(2.0) and row[("a", "ar")]["tau"] == pytest.approx(1.0)
    assert row[("a", "caddtree")]["tree_size_mean"] == pytest.approx(10.0)
    assert row[("a", "caddtree")]["tree_size_std"] == pytest.approx(np.std([4, 12, 12, 12, 10] * 3))
    assert (row[("a", "caddtree")]["match"], row[("a", "caddtree")]["compared"]) == (2, 3)
    assert row[("a", "llamacpp")]["n"] == 0 and "not installed" in row[("a", "llamacpp")]["note"]
    # one oracle row per CaDDTree variant run on the set
    assert [(o["dataset"], o["method"]) for o in s["oracle"]] == [("a", "caddtree"), ("b", "caddtree"),
                                                                   ("b", "caddtree@passes")]
    assert s["oracle"][2]["ratio"] == pytest.approx(12.1 / 11) and s["oracle"][2]["paired_faster"] == 0
    orc = {o["dataset"]: o for o in s["oracle"] if o["method"] == "caddtree"}
    assert (orc["a"]["oracle_budget"], orc["a"]["oracle_ms_per_token"]) == (16, 16.0)
    assert orc["a"]["ratio"] == pytest.approx(14 / 16)
    assert (orc["b"]["oracle_budget"], orc["b"]["ratio"]) == (16, pytest.approx(11.5 / 11))
    # per prompt: caddtree 14 vs ddtree:16 at 15, 16, 17 -> ratios 14/15, 14/16, 14/17, all faster
    assert orc["a"]["paired_ratio"] == pytest.approx(14 / 16)
    assert (orc["a"]["paired_faster"], orc["a"]["paired_n"]) == (3, 3)
    lo, hi = orc["a"]["paired_ci"]
    assert 14 / 17 <= lo <= 14 / 16 <= hi <= 14 / 15
    assert orc["b"]["paired_ci"] is None and orc["b"]["paired_faster"] == 0  # identical ratios: no interval
    text = bench_report.write_summary(s, tmp_path)
    assert "| a | caddtree | 3 | 14.00 | 2.14x |" in text and "a/caddtree 1" in text
    assert "| 0.875 [0.82, 0.93] | 3/3 |" in text
    csv = (tmp_path / "summary.csv").read_text().splitlines()
    assert csv[0].startswith("dataset,method,n,ms_per_token") and len(csv) == 1 + len(s["rows"])
    assert {p.name for p in bench_plots.write_plots(recs, s, tmp_path)} == {"speedup.png", "caddtree_budget_hist.png",
                                                                      "budget_sweep.png"}


def _linear_cost():
    """C_v(n; ℓ) = ℓ + n ms (interpolated between ℓ = 10 and 20), C_d 2 ms, first stage 0.25 ms, overhead 0.5 ms."""
    n = np.arange(9.0)
    return CostModel([10, 20], np.stack([10 + n, 20 + n]), np.ones(9), [2.0, 2.0], [0.5, 0.5], [0.25, 0.25])


def test_priced_ms_per_token_rebuilds_the_context_and_prices_each_rounds_draft():
    cost = _linear_cost()
    # rounds at ℓ = 10, 13, 14: (13 + 0.5 + 2) + (13 + 0.5 + 0.25) + (19 + 0.5 + 2) over 6 tokens
    rec = {"method": "caddtree", "prompt_len": 11, "tree_sizes": [3, 0, 5], "accepted": [2, 0, 1],
           "second_stage": [1, 0, 1], "second_stage_rounds": 2, "new_tokens": 6}
    assert bench_stats.priced_ms_per_token(rec, cost) == pytest.approx(50.75 / 6)
    # a record from before the per-round list: every round's draft at the run's share (2 of 3) of costly rounds
    old = {k: v for k, v in rec.items() if k != "second_stage"}
    per_round = 0.5 + 2 * 2 / 3 + 0.25 / 3
    assert bench_stats.priced_ms_per_token(old, cost) == pytest.approx((13 + 13 + 19 + 3 * per_round) / 6)
    # no gate: every round drafts fully; plain decoding: C_v(0; ℓ) alone
    nogate = {k: v for k, v in old.items() if k != "second_stage_rounds"}
    assert bench_stats.priced_ms_per_token(nogate, cost) == pytest.approx((13 + 13 + 19 + 3 * 2.5) / 6)
    ar = {"method": "ar", "prompt_len": 11, "tree_sizes": [0, 0], "accepted": [0, 0], "new_tokens": 2}
    assert bench_stats.priced_ms_per_token(ar, cost) == pytest.approx((10 + 11) / 2)
    # with the plain option's own overhead (0.25 ms here): CaDDTree's n = 0 round pays it instead of o
    plain = CostModel(cost.ctxs, cost.verify, cost.verify_slope, cost.draft, cost.overhead, cost.cheap_draft,
                      overhead_plain=[0.25, 0.25])
    assert bench_stats.priced_ms_per_token(ar, plain) == pytest.approx((10 + 11) / 2)
    assert bench_stats.priced_ms_per_token(rec, plain) == pytest.approx((50.75 - 0.25) / 6)
    # nothing to price: a peer's record, a tree past the profile, no profile
    assert bench_stats.priced_ms_per_token({"method": "hf", "new_tokens": 5}, cost) is None
    assert bench_stats.priced_ms_per_token({**rec, "tree_sizes": [9, 0, 5]}, cost) is None
    assert bench_stats.priced_ms_per_token(rec, None) is None


def test_summary_prices_the_oracle_by_the_cost_model(tmp_path):
    cost = _linear_cost()
    recs = []
    for pid, (clock5, clock8) in enumerate([(20.0, 21.0), (22.0, 21.5), (21.0, 25.0)]):
        base = {"prompt_len": 11, "config": "c", "match_ar": True, "prompt_id": str(pid), "dataset": "a"}
        recs += [{**base, "method": "ar", "ms_per_token": 30.0, "new_tokens": 4, "rounds": 4, "tree_sizes": [0] * 4,
                  "accepted": [0] * 4},
                 {**base, "method": "ddtree:5", "ms_per_token": clock5, "new_tokens": 4, "rounds": 2,
                  "tree_sizes": [5, 5], "accepted": [1, 1]},
                 {**base, "method": "ddtree:8", "ms_per_token": clock8, "new_tokens": 4, "rounds": 1,
                  "tree_sizes": [8], "accepted": [3]},
                 {**base, "method": "caddtree", "ms_per_token": 21.0, "new_tokens": 4, "rounds": 2,
                  "tree_sizes": [2, 6], "accepted": [1, 1]}]
    s = bench_stats.summarize(recs, lambda r: bench_stats.priced_ms_per_token(r, cost))
    row = {r["method"]: r for r in s["rows"]}
    assert row["ar"]["priced_ms_per_token"] == pytest.approx((10 + 11 + 12 + 13) / 4)
    assert row["ddtree:5"]["priced_ms_per_token"] == pytest.approx((15 + 2.5 + 17 + 2.5) / 4)
    assert row["ddtree:8"]["priced_ms_per_token"] == pytest.approx((18 + 2.5) / 4)
    assert row["caddtree"]["priced_ms_per_token"] == pytest.approx((12 + 2.5 + 18 + 2.5) / 4)
    (o,) = s["oracle"]
    assert (o["oracle_budget"], o["ratio"]) == (5, pytest.approx(21 / 21))  # by the clock: B=5 (median 21.0)
    assert (o["priced_oracle_budget"], o["priced_ratio"]) == (8, pytest.approx(35 / 20.5))  # by the price: B=8
    text = bench_report.write_summary(s, tmp_path)
    assert "| 1.707 (B=8) |" in text and "priced ms/token |" in text
    assert "priced_ratio_to_oracle" in (tmp_path / "summary.csv").read_text().splitlines()[0]
    assert "priced" not in bench_report.write_summary(bench_stats.summarize(recs), tmp_path)  # no profile: no priced column


def test_summary_pools_each_set_and_picks_its_oracle_by_the_pooled_time(tmp_path):
    """Pooled ms/token = the set's decode time over its tokens: a long answer weighs more than in the median, so the
    oracle by pooled time can be another budget than by medians; no pooled column without decode times."""
    recs = []
    # (tokens, B=5 ms/token, B=8 ms/token, CaDDTree ms/token) per prompt: B=5 has the lower median, B=8 the lower
    # pooled time (it wins the long prompt)
    for pid, (tok, b5, b8, cad) in enumerate([(10, 20.0, 22.0, 21.0), (10, 21.0, 23.0, 22.0), (100, 30.0, 24.0, 25.0)]):
        base = {"config": "c", "match_ar": True, "prompt_id": str(pid), "dataset": "a", "new_tokens": tok}
        recs += [{**base, "method": m, "ms_per_token": v, "decode_ms": v * tok}
                 for m, v in (("ar", 40.0), ("ddtree:5", b5), ("ddtree:8", b8), ("caddtree", cad))]
    s = bench_stats.summarize(recs)
    row = {r["method"]: r for r in s["rows"]}
    assert row["ddtree:5"]["pooled_ms_per_token"] == pytest.approx((200 + 210 + 3000) / 120)
    assert row["ddtree:8"]["pooled_ms_per_token"] == pytest.approx((220 + 230 + 2400) / 120)
    (o,) = s["oracle"]
    assert (o["oracle_budget"], o["ratio"]) == (5, pytest.approx(22.0 / 21.0))  # by medians: B=5, CaDDTree over
    assert o["pooled_oracle_budget"] == 8  # by pooled time: B=8
    assert o["pooled_ratio"] == pytest.approx((210 + 220 + 2500) / (220 + 230 + 2400))
    text = bench_report.write_summary(s, tmp_path)
    assert "| pooled ratio |" in text and f"| {o['pooled_ratio']:.3f} (B=8) |" in text
    header = (tmp_path / "summary.csv").read_text().splitlines()[0]
    assert "pooled_ratio_to_oracle" in header and "pooled_ms_per_token" in header
    no_times = [{k: v for k, v in r.items() if k != "decode_ms"} for r in recs]  # e.g. records of an older run
    assert "pooled" not in bench_report.write_summary(bench_stats.summarize(no_times), tmp_path)


def test_report_prices_each_drafter_with_the_profile_saved_for_it(tmp_path):
    from caddtree.costfile import save_cost_model
    from caddtree.drafter import drafter_id
    lookup = PromptLookupDrafter(64)
    save_cost_model(fit_cost_model(MEAS, {"drafter_id": drafter_id(lookup)}), tmp_path / "cost_model.json")
    save_cost_model(fit_cost_model(MEAS, {"drafter_id": "other"}), tmp_path / "cost_model_OracleDrafter.json")
    found = bench_command.saved_cost_models(tmp_path, lambda: lookup)
    assert sorted(found) == ["OracleDrafter", "PromptLookupDrafter"]
    # a default profile measured for another drafter prices nothing: its C_d is not this drafter's
    assert sorted(bench_command.saved_cost_models(tmp_path, lambda: PromptLookupDrafter(64, max_ngram=5))) == ["OracleDrafter"]


def test_quick_run_end_to_end_exact_and_resumes(tmp_path, data_dir, monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # as on a clean install: the optional peer is missing
    target = make_tiny_target(vocab=64)
    oracle = OracleDrafter(target, seed=2)
    drafters = {"auto": OracleDrafter(target, seed=1), "lookup": PromptLookupDrafter(64),
                "dflash+lookup": LookupMixtureDrafter(oracle, PromptLookupDrafter(64, oracle.num_positions))}
    cost = fit_cost_model(MEAS)
    encode = lambda text: torch.tensor([2 + ord(c) % 60 for c in text[:24]])  # noqa: E731
    methods = bench_methods.parse_methods("caddtree,ar,ddtree:4,lookup-ddtree:4,caddtree@cv2,mix-caddtree@cal,hf,llamacpp")
    run = lambda n: bench_runner.run_bench(  # noqa: E731
        target, drafters.__getitem__, lambda d: cost, {d: load_prompts(d, n, data_dir=data_dir)
                                                         for d in ("gsm8k", "alpaca")},
        methods, tmp_path / "out", max_new_tokens=12, sampling=SamplingParams(), encode=encode, progress=False)
    recs = run(1)
    lines = (tmp_path / "out/records.jsonl").read_text().splitlines()
    ours = [r for r in recs if r["method"] not in bench_methods.PEERS]
    assert len(ours) == 2 * 6 and len(lines) == 2 * 7  # llamacpp (not installed here) is not written
    assert all(r["match_ar"] is True for r in ours), [(r["method"], r.get("first_mismatch")) for r in ours]
    ar = {r["dataset"]: r for r in ours if r["method"] == "ar"}
    for r in ours:  # the record's numbers agree with each other: a timing or counting slip in one of them shows here
        assert r["new_tokens"] == len(r["tokens"]) == 12 and r["stop_reason"] == "length", r["method"]
        assert r["tokens"] == ar[r["dataset"]]["tokens"]  # T = 0: every speculative method gives plain decoding's
        assert r["decode_ms"] > 0 and r["verify_ms"] > 0 and r["draft_ms"] >= 0 and r["overhead_ms"] >= 0
        # decode time is the sum of the rounds' times: draft + build + verify + the rest (compaction, acceptance)
        assert r["decode_ms"] == pytest.approx(r["draft_ms"] + r["verify_ms"] + r["overhead_ms"], rel=1e-9)
        assert r["ms_per_token"] == pytest.approx(r["decode_ms"] / r["new_tokens"], rel=1e-9)
        assert r["tokens_per_s"] == pytest.approx(1000 * r["new_tokens"] / r["decode_ms"], rel=1e-9)
        assert r["tau"] == pytest.approx(r["new_tokens"] / r["rounds"], rel=1e-12)
        # each round emits its accepted path plus the bonus token (no EOS here, the drafts' depth fits the room)
        assert r["new_tokens"] == sum(r["accepted"]) + r["rounds"]
        assert all(0 <= a <= n <= r["budget"] for a, n in zip(r["accepted"], r["tree_sizes"]))
        assert r["tree_size_mean"] == pytest.approx(np.mean(r["tree_sizes"]), rel=1e-6)
    assert all(r["rounds"] == 12 and r["draft_ms"] == 0 and set(r["tree_sizes"]) == {0} for r in ar.values())
    assert all(sum(r["accepted"]) > 0 for r in ours if r["drafter"] == "OracleDrafter")  # the oracle's drafts land
    spec = [r for r in ours if r["method"] != "ar"]
    assert all(len(r["tree_sizes"]) == r["rounds"] == len(r["predicted_phi"]) == len(r["verify_ms_rounds"])
               for r in spec)
    assert all(sum(r["verify_ms_rounds"]) == pytest.approx(r["verify_ms"], abs=0.01 * r["rounds"]) for r in spec)
    assert all(any(f is not None for f in r["predicted_phi"]) == ("caddtree" in r["method"]) for r in spec)
    assert {r["drafter"] for r in spec} == {"OracleDrafter", "PromptLookupDrafter", "LookupMixtureDrafter"}
    gated = [r for r in spec if r["method"] == "mix-caddtree@cal"]  # the gate's choice per round, to price each
    assert gated and all(len(r["second_stage"]) == r["rounds"] and sum(r["second_stage"]) == r["second_stage_rounds"]
                         for r in gated)
    assert all(bench_stats.priced_ms_per_token(r, cost) > 0 for r in ours)
    hf = [r for r in recs if r["method"] == "hf"]
    assert len(hf) == 2 and all(r["match_ar"] is True for r in hf), [r.get("first_mismatch") for r in hf]
    assert all(r["tokens"] == ar[r["dataset"]]["tokens"] and r["new_tokens"] == 12 and r["ms_per_token"] > 0
               and r["tokens_per_s"] == pytest.approx(1000 / r["ms_per_token"]) for r in hf)
    written = [json.loads(x) for x in lines]
    n_written = len(written)
    assert not any("skipped" in r for r in written)  # a missing peer is reported, not recorded as done
    keys = [bench_records.record_key(r) for r in written]
    assert len(keys) == len(set(keys))
    # rerun: nothing new; then one more prompt per dataset: only those are added
    run(1)
    assert len((tmp_path / "out/records.jsonl").read_text().splitlines()) == n_written
    recs2 = run(2)
    written2 = [json.loads(x) for x in (tmp_path / "out/records.jsonl").read_text().splitlines()]
    keys2 = [bench_records.record_key(r) for r in written2]
    assert len(keys2) == len(set(keys2)) and len(written2) == 2 * n_written
    assert all(r["match_ar"] for r in recs2 if r["method"] not in bench_methods.PEERS)
    s = bench_stats.summarize(recs2)
    assert all(r["compared"] == r["match"] for r in s["rows"] if r["n"] and r["method"] not in bench_methods.PEERS)
    assert all((r.get("phi_predicted") is not None) == ("caddtree" in r["method"]) for r in s["rows"] if r["n"])
    assert "expected," in bench_report.write_summary(s, tmp_path / "out")
    bench_plots.write_plots(recs2, s, tmp_path / "out")
    assert (tmp_path / "out/summary.md").is_file() and (tmp_path / "out/speedup.png").is_file()


def test_cli_registers_bench():
    from caddtree.cli import build_parser
    args = build_parser().parse_args(["bench", "--quick", "--out", "x", "--perturb", "--methods", "ar,ddtree:4,8"])
    assert args.func is bench_command.cmd_bench and args.quick and args.perturb and args.first_prompt == 0
    args = build_parser().parse_args(["bench", "--out", "x", "--first-prompt", "-1"])
    with pytest.raises(CaddtreeError, match="--first-prompt must be >= 0"):
        bench_command.cmd_bench(args)
    args = build_parser().parse_args(["bench", "--out", "x", "--repeats", "0"])
    with pytest.raises(CaddtreeError, match="--repeats must be >= 1"):
        bench_command.cmd_bench(args)


def test_split_run_parts_cover_every_prompt_once_round_robin(tmp_path, data_dir, monkeypatch):
    target = make_tiny_target(vocab=64)
    cost = fit_cost_model(MEAS)
    encode = lambda text: torch.tensor([2 + ord(c) % 60 for c in text[:24]])  # noqa: E731
    prompts = {d: load_prompts(d, 2, data_dir=data_dir) for d in ("gsm8k", "math500")}
    run = lambda part: bench_runner.run_bench(  # noqa: E731
        target, lambda kind: OracleDrafter(target, seed=1), lambda d: cost, prompts, ["ar", "ddtree:4"],
        tmp_path / "out", max_new_tokens=6, sampling=SamplingParams(), encode=encode, progress=False, part=part)
    run((2, 2))
    second = [json.loads(x) for x in (tmp_path / "out/records.part2of2.jsonl").read_text().splitlines()]
    # round-robin order gsm8k#0, math500#0, gsm8k#1, math500#1: part 2 takes the odd ones
    assert [(r["dataset"], r["prompt_id"]) for r in second if r["method"] == "ar"] == [
        ("math500", str(prompts["math500"][i]["id"])) for i in range(2)]
    run((1, 2))
    every = bench_records.load_records(tmp_path / "out")
    keys = [bench_records.record_key(r) for r in every]
    assert len(keys) == len(set(keys)) == 2 * 2 * 2
    assert run((1, 1)) and len(bench_records.load_records(tmp_path / "out")) == 8  # the combined rerun adds nothing
    with pytest.raises(CaddtreeError, match="--part"):
        bench_command._parse_part("3/2")
    # --report: the combined summary of both parts, without running anything
    from caddtree.cli import build_parser
    monkeypatch.setattr("caddtree.bench.command.load_target_from", lambda args: target)
    monkeypatch.setattr("caddtree.bench.command.ensure_cost_model", lambda *a, **k: cost)
    argv = ["bench", "--report", "--out", str(tmp_path / "out"), "--datasets", "gsm8k,math500", "--methods",
            "ar,ddtree:4", "--num-prompts", "2", "--max-new-tokens", "6", "--data-dir", str(data_dir), "--drafter",
            "lookup"]
    args = build_parser().parse_args(argv)
    with open(tmp_path / "out/records.part1of2.jsonl", "a") as f:  # a prompt cut off after its first method
        f.write(json.dumps({**every[0], "prompt_id": "cut", "method": "ar"}) + "\n")
    args.func(args)
    assert len(bench_records.load_records(tmp_path / "out")) == 9
    text = (tmp_path / "out/summary.md").read_text()
    assert "| gsm8k | ddtree:4 | 2 |" in text and "| math500 | ddtree:4 | 2 |" in text
    assert f"| {every[0]['dataset']} | ar | 2 |" in text  # the cut prompt is left out
    # a report for options no finished prompt was run with, or past the data's last prompt: one line, no summary
    other = build_parser().parse_args([*argv, "--max-new-tokens", "7"])
    with pytest.raises(CaddtreeError, match="no prompt in .* has finished every method with these options"):
        other.func(other)
    past = build_parser().parse_args([*argv, "--first-prompt", "1000"])
    with pytest.raises(CaddtreeError, match="--first-prompt 1000 is past the last prompt of gsm8k, math500"):
        past.func(past)


def test_method_order_alternates_per_prompt_within_each_part(tmp_path, data_dir):
    """`ar` first (the exact-match reference), the rest forward on a part's even prompts and backward on its odd
    ones: records are appended in run order."""
    target = make_tiny_target(vocab=64)
    encode = lambda text: torch.tensor([2 + ord(c) % 60 for c in text[:24]])  # noqa: E731
    prompts = {d: load_prompts(d, 2, data_dir=data_dir) for d in ("gsm8k", "math500")}  # part 2: math500 #0, #1
    bench_runner.run_bench(target, lambda kind: OracleDrafter(target, seed=1), None, prompts,
                    ["ddtree:2", "ar", "ddtree:3", "ddtree:4"], tmp_path / "out", max_new_tokens=4,
                    sampling=SamplingParams(), encode=encode, progress=False, part=(2, 2))
    runs = [json.loads(x)["method"] for x in (tmp_path / "out/records.part2of2.jsonl").read_text().splitlines()]
    assert runs == ["ar", "ddtree:2", "ddtree:3", "ddtree:4", "ar", "ddtree:4", "ddtree:3", "ddtree:2"]


def test_llamacpp_peer_streams_until_eos_with_plain_sampling_settings(monkeypatch):
    """The llama.cpp peer (a fake `llama_cpp` here): tokens until EOS or max_new_tokens, decode time from the stream,
    and none of llama.cpp's own sampling defaults (min_p) left on."""
    import types
    calls = []

    class FakeLlama:
        def __init__(self, **kw):
            self.kw = kw

        def reset(self):
            pass

        def generate(self, tokens, **kw):
            calls.append(kw)
            yield from [11, 12, 13, 99, 14]

    monkeypatch.setitem(sys.modules, "llama_cpp", types.SimpleNamespace(Llama=FakeLlama))
    monkeypatch.setattr(bench_peers, "_LLAMA", {})
    clock = iter(range(100))  # a fake clock, one second per reading: t0 = 0, then one stamp per streamed token
    monkeypatch.setattr(bench_peers, "time", types.SimpleNamespace(perf_counter=lambda: float(next(clock))))
    target = types.SimpleNamespace(name="/models/x.gguf", max_context=64, eos_ids={99})
    r = bench_peers.run_llamacpp(target, torch.tensor([1, 2, 3]), 10, SamplingParams(), seed=0, isolate=False)
    assert r["tokens"] == [11, 12, 13, 99] and r["timed_tokens"] == 3
    assert (r["prefill_ms"], r["decode_ms"]) == (1000.0, 3000.0)  # token 1 at 1 s; tokens 2..4 at 2, 3, 4 s
    assert calls[-1]["top_k"] == 1 and calls[-1]["min_p"] == 0.0
    r = bench_peers.run_llamacpp(target, torch.tensor([1, 2, 3]), 2, SamplingParams(temperature=1.0), seed=0,
                           isolate=False)
    assert r["tokens"] == [11, 12] and calls[-1]["top_k"] == 0 and calls[-1]["temp"] == 1.0
    with pytest.raises(CaddtreeError, match="GGUF"):
        bench_peers.run_llamacpp(types.SimpleNamespace(name="some/hub-id", max_context=64, eos_ids=set()),
                           torch.tensor([1]), 2, SamplingParams(), seed=0)


def test_peer_process_answers_and_reports_a_crash_in_one_line():
    """A peer in its own process: requests are answered, a Python error comes back as one line, and a segfault in
    the child (faulthandler._sigsegv, as llama.cpp's native crash) raises PeerCrashed instead of ending the bench."""
    import faulthandler
    import operator
    peer = bench_peers.PeerProcess(operator.itemgetter, 1, name="toy")
    assert peer([5, 6]) == 6
    with pytest.raises(RuntimeError, match="IndexError"):
        peer([5])
    assert peer([7, 8]) == 8  # still serving after an error
    with pytest.raises(bench_peers.PeerCrashed, match=r"toy crashed \(signal SIGSEGV\)"):
        bench_peers.PeerProcess(faulthandler._sigsegv, name="toy")


def test_repeats_keep_each_methods_fastest_run_and_reverse_the_order(tmp_path, data_dir, monkeypatch):
    """--repeats 2: each prompt's methods run twice, the second time in reverse (after `ar`); a record holds the
    fastest run, every run's ms/token, and match_ar only if every run matched plain decoding."""
    target = make_tiny_target(vocab=64)
    prompts = {"gsm8k": load_prompts("gsm8k", 2, data_dir=data_dir)}
    ms = iter([40, 20, 30, 41, 25, 22,    # prompt 0: ar, ddtree:4, ddtree:8 | ar, ddtree:8, ddtree:4
               42, 31, 21, 39, 19, 33])   # prompt 1: ar, ddtree:8, ddtree:4 | ar, ddtree:4, ddtree:8
    calls = []

    def fake_run(m, *args):
        calls.append(m)
        wrong = len(calls) == 12  # prompt 1's second ddtree:8 run: a mismatch at token 2, in its slower run
        return {"tokens": [5, 6, 9 if wrong else 7], "new_tokens": 3, "ms_per_token": float(next(ms))}

    monkeypatch.setattr(bench_runner, "_run_one", fake_run)
    run = lambda: bench_runner.run_bench(  # noqa: E731
        target, lambda kind: OracleDrafter(target, seed=1), None, prompts, ["ar", "ddtree:4", "ddtree:8"],
        tmp_path / "out", max_new_tokens=3, sampling=SamplingParams(), encode=lambda t: torch.tensor([2, 3, 4]),
        progress=False, repeats=2)
    recs = {(r["prompt_id"], r["method"]): r for r in run()}
    p0, p1 = (str(x["id"]) for x in prompts["gsm8k"])
    assert calls == ["ar", "ddtree:4", "ddtree:8", "ar", "ddtree:8", "ddtree:4",
                     "ar", "ddtree:8", "ddtree:4", "ar", "ddtree:4", "ddtree:8"]
    best = {(p0, "ar"): (40, [40, 41]), (p0, "ddtree:4"): (20, [20, 22]), (p0, "ddtree:8"): (25, [30, 25]),
            (p1, "ar"): (39, [42, 39]), (p1, "ddtree:4"): (19, [21, 19]), (p1, "ddtree:8"): (31, [31, 33])}
    assert {k: (r["ms_per_token"], r["ms_per_token_runs"]) for k, r in recs.items()} == best
    assert [k for k, r in recs.items() if not r["match_ar"]] == [(p1, "ddtree:8")]
    assert recs[(p1, "ddtree:8")]["first_mismatch"] == 2 and recs[(p1, "ddtree:8")]["tokens"] == [5, 6, 7]
    assert [k for k, r in recs.items() if not r["runs_identical"]] == [(p1, "ddtree:8")]
    assert len((tmp_path / "out/records.jsonl").read_text().splitlines()) == 6
    run()  # resumed: nothing left to run
    assert len(calls) == 12


def test_identical_to_plain_counts_matches_against_another_runs_plain_decoding(tmp_path):
    from caddtree.bench import identical_to_plain
    plain = [{"dataset": "a", "prompt_id": p, "method": "ar", "config": "c", "tokens": [p, 1]} for p in (0, 1)]
    plain.append({"dataset": "a", "prompt_id": 0, "method": "ar", "config": "other", "tokens": [9]})
    (tmp_path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in plain))
    run = [{"dataset": "a", "prompt_id": 0, "method": "caddtree", "config": "c", "tokens": [0, 1]},
           {"dataset": "a", "prompt_id": 1, "method": "caddtree", "config": "c", "tokens": [1, 2]}]
    assert identical_to_plain(run, tmp_path) == 1
    with pytest.raises(KeyError):  # a prompt the plain run lacks is an error, not a silent pass
        identical_to_plain(run + [{**run[0], "prompt_id": 2}], tmp_path)


def test_own_prompt_file_is_a_set_beside_the_datasets(tmp_path, data_dir):
    """--prompts FILE: 'prompt' lines go through the chat template, 'messages' lines are the chat; the set is named
    after the file (or --prompts-name), alone or beside --datasets; a bad line is one error naming it."""
    from caddtree.cli import build_parser
    f = tmp_path / "mine.jsonl"
    _jsonl(f, [{"prompt": "Tell me a joke."}, {"id": "q2", "messages": [{"role": "system", "content": "Be brief."},
                                                                          {"role": "user", "content": "Hi!"}]}])
    parse = lambda *a: build_parser().parse_args(["bench", "--out", str(tmp_path / "o"), *a])  # noqa: E731
    run = bench_command.check_bench_args(parse("--prompts", str(f)))
    assert run["names"] == ["mine"] and [x["id"] for x in run["prompts"]["mine"]] == [0, "q2"]
    assert run["prompts"]["mine"][1]["messages"][0] == {"role": "system", "content": "Be brief."}
    run = bench_command.check_bench_args(parse("--prompts", str(f), "--prompts-name", "ours", "--datasets", "gsm8k",
                                               "--data-dir", str(data_dir), "--num-prompts", "1"))
    assert run["names"] == ["gsm8k", "ours"] and len(run["prompts"]["ours"]) == 1
    for bad, msg in ([{"prompt": ""}], "record 1"), ([{"messages": [{"role": "user"}]}], "record 1"), \
                    ([{"prompt": "a", "id": 1}, {"prompt": "b", "id": 1}], "ids repeat"):
        _jsonl(f, bad)
        with pytest.raises(CaddtreeError, match=msg):
            bench_command.check_bench_args(parse("--prompts", str(f)))
    with pytest.raises(CaddtreeError, match="no such file"):
        bench_command.check_bench_args(parse("--prompts", str(tmp_path / "nope.jsonl")))
    with pytest.raises(CaddtreeError, match="built-in"):
        bench_command.check_bench_args(parse("--prompts", str(f), "--prompts-name", "gsm8k"))
    # a messages record is run through the target's chat template (here a stand-in), exactly
    target, seen = make_tiny_target(vocab=64), []
    target.messages_ids = lambda msgs: seen.append(msgs) or torch.tensor([3, 4, 5, 6])
    prompts = {"mine": [{"id": "q2", "messages": [{"role": "user", "content": "Hi!"}]}]}
    recs = bench_runner.run_bench(target, lambda spec: PromptLookupDrafter(64), lambda d: None, prompts,
                                  ["ar", "ddtree:4"], tmp_path / "out2", max_new_tokens=8, sampling=SamplingParams(),
                                  progress=False)
    assert seen and seen[-1] == [{"role": "user", "content": "Hi!"}]
    assert {(r["dataset"], r["prompt_id"], r["method"]) for r in recs} == {("mine", "q2", "ar"),
                                                                           ("mine", "q2", "ddtree:4")}
    assert all(r["match_ar"] for r in recs if r["method"] != "ar")
