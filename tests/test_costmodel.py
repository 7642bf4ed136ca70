"""Cost model: the fit convexifies measured profiles, the ctx rules keep shapes, JSON round-trips and bad files fail
with a CaddtreeError."""
import json
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from caddtree import costmodel as cmod
from caddtree.costfile import FORMAT, default_cost_path, load_cost_model, plot_cost_model, save_cost_model
from caddtree.costmodel import CostModel, check_cost_model, fit_cost_model
from caddtree.errors import CaddtreeError
from conftest import make_tiny_target

# the reference table (ms of a forward with n+1 tokens, i.e. n tree nodes + root): not convex at small n
REF = {"ns": [0, 1, 3, 7, 15, 31, 63, 127], "ctxs": [128, 512, 2048],
       "verify_ms": [[31, 35, 49, 58, 64, 82, 123, 190], [35, 40, 56, 67, 74, 92, 138, 209],
                     [47, 60, 77, 93, 105, 131, 194, 307]], "draft_ms": [2.0, 1.9, 4.0], "overhead_ms": [0.5, 0.6, 0.6]}
PROV = {"target_fingerprint": "llama-abc", "drafter_id": "lookup-1", "device": "cpu"}


def assert_shapes(v: np.ndarray, tol=1e-9, convex: bool = True):
    """v [..., n]: non-decreasing along the last axis (integer grid), convex from n = 1 on if `convex`."""
    scale = tol * max(1.0, float(np.abs(v).max()))
    assert np.all(np.diff(v, axis=-1) >= -scale)
    assert not convex or np.all(np.diff(v[..., 1:], n=2, axis=-1) >= -scale)


@pytest.fixture(scope="module")
def ref_model():
    return fit_cost_model({**REF, "verify_fit": "convex"}, PROV)


def test_reference_profile_is_convexified(ref_model):
    m = ref_model
    assert m.max_nodes == 127 and m.ctxs == [128, 512, 2048]
    assert check_cost_model(m) is None
    assert_shapes(m.verify)
    assert np.all(np.diff(m.verify, axis=0) >= 0)  # monotone in ℓ
    raw = np.asarray(REF["verify_ms"], dtype=float)
    fit = m.verify[:, REF["ns"]]
    assert np.array_equal(fit[:, 0], raw[:, 0])  # the plain step is kept as measured
    # as close to the data as a convex curve can be: the table is concave up to n = 15, so ~20% at worst
    assert np.all(np.abs(fit / raw - 1) < 0.25)
    assert np.sqrt(np.mean((fit / raw - 1) ** 2)) < 0.12
    assert np.any(np.diff(raw[:, 1:], n=2, axis=1) < -1)  # (the data really was not convex)
    assert np.all(np.diff(m.draft) >= 0) and m.draft[1] == pytest.approx(1.9474, abs=1e-3)  # pools 2.0/1.9


def test_cvxpy_and_scipy_fallback_agree(monkeypatch):
    x, y = REF["ns"], REF["verify_ms"][2]
    a = cmod._shape_fit(x, y, convex=True)
    monkeypatch.setitem(sys.modules, "cvxpy", None)  # import fails -> scipy path
    b = cmod._shape_fit(x, y, convex=True)
    assert np.allclose(a, b, rtol=1e-3)
    # isotonic in relative error: 3 and 1 pool at (3/9 + 1/1) / (1/9 + 1/1) = 1.2
    assert np.allclose(cmod._shape_fit([1, 2, 5], [3.0, 1.0, 4.0], convex=False), [1.2, 1.2, 4.0], rtol=1e-4)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31), n_ctx=st.integers(1, 4), noise=st.sampled_from([0.0, 0.3]),
       shape=st.sampled_from(["convex", "monotone"]))
def test_fit_has_its_shape_and_is_exact_on_data_of_that_shape(seed, n_ctx, noise, shape):
    rng = np.random.default_rng(seed)
    ns = np.unique(np.r_[0, 1, rng.integers(2, 200, size=rng.integers(0, 9))])
    ctxs = np.sort(rng.choice(np.arange(16, 8192), size=n_ctx, replace=False))
    true = np.stack([rng.uniform(5, 50) + rng.uniform(0, 0.5) * ns + rng.uniform(0, 0.01) * ns ** 2
                     for _ in ctxs])
    true[:, 0] *= rng.uniform(0.5, 1.0)  # the plain step may sit below the convex curve (no tree mask)
    noisy = true * rng.uniform(1 - noise, 1 + noise, true.shape)  # noise breaks convexity and ℓ-monotonicity
    meas = {"ns": ns.tolist(), "ctxs": ctxs.tolist(), "verify_ms": noisy.tolist(),
            "draft_ms": rng.uniform(0, 5, n_ctx).tolist(), "overhead_ms": 0.3, "verify_fit": shape}
    m = fit_cost_model(meas)
    convex = shape == "convex"
    assert check_cost_model(m) is None and m.verify_fit == shape
    assert_shapes(m.verify, convex=convex)
    assert np.all(np.diff(m.verify, axis=0) >= 0) and np.all(np.diff(m.draft) >= 0)
    assert_shapes(m.verify_slope, convex=convex)
    assert np.all(m.verify_slope >= 0)
    if noise == 0.0 and n_ctx == 1:  # already convex and monotone: the fit is the data
        assert np.allclose(m.verify[0, ns], true[0], rtol=1e-4)
    # ℓ rules: blended, below-grid and extrapolated curves keep the shape and are ordered in ℓ
    probe = [1, int(ctxs[0]), int(ctxs[-1]) + 1, int(ctxs[-1]) * 3] + [int(c) + 7 for c in ctxs]
    curves = np.stack([m.verify_curve(c) for c in sorted(probe)])
    assert_shapes(curves, tol=1e-7, convex=convex)
    assert np.all(np.diff(curves, axis=0) >= -1e-9)
    assert np.allclose(m.verify_curve(1), m.verify[0])


# C_v measured on a 2-core Intel Xeon (SmolLM2-135M, panel kernel, 1 thread, ℓ = 128, the other core busy; medians of
# 9; results/bench-intel-monofit/staircase/core0.json): ~4 ms per row within the first 6-row pass, ~2 ms per node
# from 24 nodes on, dips at 10 and 16 rows: monotone, far from convex
INTEL_NS = list(range(21)) + [23, 24, 29, 30, 35, 36, 48, 64]
INTEL_MS = [49.2, 55.1, 59.0, 63.2, 67.0, 70.8, 77.9, 79.3, 82.2, 80.0, 82.2, 86.2, 89.6, 92.8, 95.1, 91.8, 93.8, 96.7,
            100.9, 103.1, 106.8, 109.6, 114.1, 118.5, 124.4, 131.9, 137.6, 160.9, 189.0]


@pytest.mark.parametrize("solver", ["cvxpy", "scipy"])
def test_monotone_fit_keeps_the_small_tree_slope_a_convex_fit_flattens(monkeypatch, solver):
    if solver == "scipy":
        monkeypatch.setitem(sys.modules, "cvxpy", None)
    meas = {"ns": INTEL_NS, "ctxs": [128], "verify_ms": [INTEL_MS], "draft_ms": 10.0, "row_group": 6}
    mono = fit_cost_model({**meas, "verify_fit": "monotone"})
    conv = fit_cost_model({**meas, "verify_fit": "convex"})
    assert mono.verify_fit == "monotone" and check_cost_model(mono) is None and np.all(mono.pass_ms == 0)
    fit, raw = mono.verify_curve(128), np.asarray(INTEL_MS)
    assert np.all(np.diff(fit) >= 0)
    # the data where it is monotone; the two dips pooled with the size before them (relative weights)
    keep = [n for n in range(len(INTEL_NS)) if INTEL_NS[n] not in (8, 9, 14, 15)]
    assert np.allclose(fit[np.array(INTEL_NS)[keep]], raw[keep], rtol=1e-3)
    assert fit[8] == pytest.approx(fit[9], rel=1e-3) and 80.0 < fit[8] < 82.2
    # the step CaDDTree weighs on code (4 -> 8 nodes): measured +15.2 ms; the convex fit (with pass jumps) gives
    # under 70% of it and prices one node 10% high, since one convex curve through 1..64 nodes must take the
    # ~2 ms/node slope of large trees from n = 1 on
    assert fit[8] - fit[4] == pytest.approx(14.1, abs=0.5)
    conv_fit = conv.verify_curve(128)
    assert conv_fit[8] - conv_fit[4] < 0.7 * (raw[8] - raw[4]) and conv_fit[1] > 1.1 * raw[1]


def _staircase(ns, jump, group=6):
    """A kernel's verify cost with passes of `group` rows: smooth convex part + `jump` per extra pass."""
    ns = np.asarray(ns)
    return 30.0 + 0.8 * ns + 0.01 * ns ** 2 + jump * (ns // group)


@pytest.mark.parametrize("solver", ["cvxpy", "scipy"])
def test_pass_jumps_are_fitted_apart_from_the_convex_part(monkeypatch, solver):
    from caddtree.profile import size_grid
    if solver == "scipy":
        monkeypatch.setitem(sys.modules, "cvxpy", None)
    ns = size_grid([0, 1, 2, 4, 8, 16, 32, 64], 6)
    assert ns == [0, 1, 2, 4, 5, 6, 8, 11, 12, 16, 17, 18, 32, 64]
    true = _staircase(ns, 6.0)
    true[0] = 28.0
    meas = {"ns": ns, "ctxs": [128, 512], "verify_ms": [true.tolist(), (true + 3).tolist()], "draft_ms": 5.0,
            "row_group": 6, "verify_fit": "convex"}
    m = fit_cost_model(meas)
    assert m.row_group == 6 and np.allclose(m.pass_ms, 6.0, rtol=1e-2) and check_cost_model(m) is None
    assert_shapes(m.verify)  # the table is the convex part; the jumps come on top in verify_curve
    assert np.allclose(m.verify_curve(128)[ns], true, rtol=1e-3)
    assert m.verify_ms(6, 128) - m.verify_ms(5, 128) == pytest.approx(6.0 + 0.8 + 0.11, rel=1e-2)
    assert np.all(np.diff(m.verify_curve(300)) >= 0) and m.verify_ms(64, 9000) >= m.verify_ms(64, 512)
    # the same measurements without the pass term: a convex curve misses the jumps by several %
    plain = fit_cost_model({**meas, "row_group": 1})
    assert plain.row_group == 1 and np.all(plain.pass_ms == 0)
    assert np.max(np.abs(plain.verify_curve(128)[ns] / true - 1)) > 0.03
    # the monotone fit follows the steps as measured, with no pass term
    mono = fit_cost_model({**meas, "verify_fit": "monotone"})
    assert np.all(mono.pass_ms == 0) and np.allclose(mono.verify_curve(128)[ns], true, rtol=1e-4)
    # no jumps in the data: J = 0 and the fit is the data, as without the pass term
    smooth = fit_cost_model({**meas, "verify_ms": [_staircase(ns, 0.0).tolist()] * 2})
    assert np.allclose(smooth.pass_ms, 0.0, atol=0.05)  # solver tolerance: 0.2% of a pass
    assert np.allclose(smooth.verify_curve(128)[ns[1:]], _staircase(ns, 0.0)[1:], rtol=1e-3)
    with pytest.raises(CaddtreeError, match="row_group"):
        fit_cost_model({**meas, "row_group": 0})


def test_ctx_rules_and_queries(ref_model):
    m = ref_model
    assert m.verify_ms(5, 320) == pytest.approx(0.5 * (m.verify[0, 5] + m.verify[1, 5]))
    assert m.verify_ms(5, 224) == pytest.approx(0.75 * m.verify[0, 5] + 0.25 * m.verify[1, 5])  # linear in ℓ
    assert m.draft_ms(896) == pytest.approx(0.75 * m.draft[1] + 0.25 * m.draft[2])
    assert m.verify_ms(5, 64) == m.verify[0, 5]                                       # below: first ctx
    slope = (m.verify[2, 5] - m.verify[1, 5]) / (2048 - 512)
    assert m.verify_ms(5, 4096) == pytest.approx(m.verify[2, 5] + 2048 * slope, rel=0.05)  # above: extrapolate
    assert m.draft_ms(4096) == pytest.approx(m.draft[2] + 2048 * (m.draft[2] - m.draft[1]) / 1536)
    got = m.verify_ms(np.array([0, 3, 127]), 700)
    assert isinstance(got, np.ndarray) and np.allclose(got, m.verify_ms(torch.tensor([0, 3, 127]), 700))
    assert isinstance(m.verify_ms(3, 700), float)
    assert m.round_ms(3, 700) == pytest.approx(m.draft_ms(700) + m.overhead_ms(700) + m.verify_ms(3, 700))
    for bad in (128, -1, np.array([1, 500])):
        with pytest.raises(CaddtreeError, match="profile covers 0..127"):
            m.verify_ms(bad, 700)


def test_fit_rejects_bad_measurements():
    for ns in ([1, 2, 4, 8, 16, 32, 64, 128], [0, 2, 4, 8, 16, 32, 64, 128]):
        with pytest.raises(CaddtreeError, match="starting 0, 1"):
            fit_cost_model({**REF, "ns": ns})
    with pytest.raises(CaddtreeError, match="verify_ms"):
        fit_cost_model({**REF, "verify_ms": REF["verify_ms"][:2]})
    with pytest.raises(CaddtreeError, match="malformed"):
        fit_cost_model({"ns": [0, 1]})


def test_json_round_trip(ref_model, tmp_path):
    p = save_cost_model(ref_model, tmp_path / "sub" / "p.json")
    assert json.loads(p.read_text())["format"] == FORMAT
    m = load_cost_model(p, target_fingerprint="llama-abc", drafter_id="lookup-1")
    assert m.ctxs == ref_model.ctxs and m.provenance == PROV and m.measurements == {**REF, "verify_fit": "convex"}
    for a in ("verify", "verify_slope", "draft", "overhead"):
        assert np.array_equal(getattr(m, a), getattr(ref_model, a))
    assert m.verify_ms(17, 9000) == ref_model.verify_ms(17, 9000)
    assert load_cost_model(p).max_nodes == 127  # no identity asked: not checked
    ns = [0, 1, 5, 6, 11, 12, 32]
    passes = fit_cost_model({"ns": ns, "ctxs": [64], "verify_ms": [_staircase(ns, 4.0).tolist()], "draft_ms": 1.0,
                             "row_group": 6, "verify_fit": "convex"})
    back = load_cost_model(save_cost_model(passes, tmp_path / "g.json"))
    assert back.row_group == 6 and np.array_equal(back.pass_ms, passes.pass_ms)
    assert np.array_equal(back.verify_curve(100), passes.verify_curve(100))
    mono = fit_cost_model(REF)  # the default shape
    assert mono.verify_fit == "monotone"
    assert load_cost_model(save_cost_model(mono, tmp_path / "m.json")).verify_fit == "monotone"
    _edit(p, lambda d: [d["fit"].pop(k, None) for k in ("row_group", "pass_ms", "verify_fit")])  # an old profile
    old = load_cost_model(p)
    assert old.row_group == 1 and old.verify_fit == "convex"
    assert np.array_equal(old.verify_curve(700), ref_model.verify_curve(700))


def _edit(path, fn):
    doc = json.loads(path.read_text())
    fn(doc)
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize("case,match", [
    ("missing", "no cost profile"), ("corrupt", "corrupt"), ("not_dict", "format"), ("version", "format"),
    ("target", "made for target"), ("drafter", "made for drafter"), ("concave", "not convex"),
    ("decreasing", "not convex non-decreasing"), ("ctx_order", "context length"), ("draft_down", "draft"),
    ("nan", "non-finite"), ("no_fit", "corrupt"), ("shape", "shapes"), ("pass_negative", "pass cost is negative"),
    ("row_group", "row_group below 1"), ("mono_decreasing", "not non-decreasing in n"),
    ("unknown_fit", "unknown verify_fit")])
def test_bad_files_are_rejected(ref_model, tmp_path, case, match):
    p = save_cost_model(ref_model, tmp_path / "p.json")
    edits = {
        "missing": lambda: p.unlink(),
        "corrupt": lambda: p.write_text(p.read_text()[:200]),
        "not_dict": lambda: p.write_text("[1, 2]"),
        "version": lambda: _edit(p, lambda d: d.update(format="caddtree-cost/0")),
        "concave": lambda: _edit(p, lambda d: d["fit"]["verify_ms"][0].__setitem__(
            slice(None), list(np.sqrt(np.arange(128.0)) + 30))),
        "decreasing": lambda: _edit(p, lambda d: d["fit"]["verify_ms"][1].__setitem__(0, 1e3)),
        "ctx_order": lambda: _edit(p, lambda d: d["fit"]["verify_ms"].reverse()),
        "draft_down": lambda: _edit(p, lambda d: d["fit"]["draft_ms"].reverse()),
        "nan": lambda: p.write_text(p.read_text().replace(str(ref_model.verify[0, 3]), "NaN", 1)),
        "no_fit": lambda: _edit(p, lambda d: d.pop("fit")),
        "shape": lambda: _edit(p, lambda d: d["fit"]["draft_ms"].pop()),
        "pass_negative": lambda: _edit(p, lambda d: d["fit"].update(row_group=6, pass_ms=[-1.0] * 3)),
        "row_group": lambda: _edit(p, lambda d: d["fit"].update(row_group=0)),
        "mono_decreasing": lambda: _edit(p, lambda d: (d["fit"].update(verify_fit="monotone"),
                                                        d["fit"]["verify_ms"][2].__setitem__(5, 0.0))),
        "unknown_fit": lambda: _edit(p, lambda d: d["fit"].update(verify_fit="spline")),
    }
    edits.get(case, lambda: None)()
    kw = {"target": dict(target_fingerprint="other"), "drafter": dict(drafter_id="dflash-9")}.get(case, {})
    with pytest.raises(CaddtreeError, match=match) as e:
        load_cost_model(p, **kw)
    assert "\n" not in str(e.value) and ("profile" in str(e.value))


def test_default_path_and_plot(ref_model, tmp_path, monkeypatch):
    monkeypatch.setenv("CADDTREE_CACHE", str(tmp_path / "cache"))
    p = default_cost_path("llama-abc", "dflash/x y", "cpu-t2")
    assert p.parent == tmp_path / "cache" / "profiles" and p.suffix == ".json" and " " not in p.name
    assert default_cost_path("llama-abc", "other", "cpu-t2") != p
    png = plot_cost_model(ref_model, tmp_path / "fig.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_profile_end_to_end_on_a_tiny_model(tmp_path, monkeypatch, capsys):
    """profile -> fit -> save -> load through the real engine path, on a random 2-layer Llama (seconds)."""
    from caddtree import profile
    from caddtree.drafter import PromptLookupDrafter

    monkeypatch.setenv("CADDTREE_CACHE", str(tmp_path))
    target = make_tiny_target(vocab=101, max_pos=256)
    drafter = PromptLookupDrafter(101, num_positions=4)
    monkeypatch.setitem(profile.PRESETS, "coarse", dict(ns=[1, 2, 8], ctxs=[16, 999], repeats=2, warmup=1))
    m = profile.ensure_cost_model(target, drafter, progress=False)
    err = capsys.readouterr().err
    assert "verify cost measured (coarse preset" in err and "measuring C_d" in err
    assert m.measurements["ns"] == [0, 1, 2, 8] and m.max_nodes == 8
    # clamped so every forward fits the context window, the draft timing's (two stages per call at most) included
    assert m.measurements["ctxs"][-1] == 256 - 8 - 2 * profile.NEW_TOKENS * (1 + profile.DRAFT_REPEATS) - 2
    assert check_cost_model(m) is None and m.provenance["target_fingerprint"] == target.fingerprint
    assert np.all(np.asarray(m.measurements["verify_ms"]) > 0) and np.all(np.asarray(m.measurements["draft_ms"]) > 0)
    path = default_cost_path(target.fingerprint, profile.drafter_id(drafter), profile.device_label(target))
    assert path.is_file() and path.with_suffix(".png").is_file() and target.hidden_layers == []
    assert profile.verify_profile_path(target).is_file()
    again = profile.ensure_cost_model(target, drafter)
    assert "loaded" in capsys.readouterr().err and np.array_equal(again.verify, m.verify)
    other = PromptLookupDrafter(101, num_positions=6)  # a second drafter is priced on the same verify measurement
    m2 = profile.ensure_cost_model(target, other, progress=False)
    err = capsys.readouterr().err
    assert "verify cost measured" not in err and "measuring C_d" in err and np.array_equal(m2.verify, m.verify)
    m3 = profile.ensure_cost_model(target, drafter, progress=False, force=True)
    assert "verify cost measured" in capsys.readouterr().err
    m4 = profile.ensure_cost_model(target, other, progress=False)  # its cached profile predates the new C_v ...
    err = capsys.readouterr().err
    assert "rebuilding on it" in err and np.array_equal(m4.verify, m3.verify)
    assert m4.provenance["verify_id"] == m3.provenance["verify_id"] != m.provenance["verify_id"]
    # ... and is refitted on it with its own C_d, timed on the same ctx grid, kept rather than timed again
    assert "measuring C_d" not in err and "kept" in err
    assert m4.measurements["draft_ms"] == m2.measurements["draft_ms"] and np.array_equal(m4.draft, m2.draft)
    assert m4.provenance["draft_date"] == m2.provenance["draft_date"]
    assert m4.verify_fit == "monotone"
    p_other = default_cost_path(target.fingerprint, profile.drafter_id(other), profile.device_label(target))
    save_cost_model(fit_cost_model({**m4.measurements, "verify_fit": "convex"}, m4.provenance), p_other)
    m5 = profile.ensure_cost_model(target, other, progress=False)  # fitted convex (an old default): refitted
    assert "rebuilding on it" in capsys.readouterr().err and m5.verify_fit == "monotone"
    path.write_text("{")  # a broken cache entry is re-profiled, an explicit broken file refused
    profile.ensure_cost_model(target, drafter, progress=False)
    assert "re-profiling" in capsys.readouterr().err
    path.write_text("{")
    with pytest.raises(CaddtreeError, match="corrupt"):
        profile.ensure_cost_model(target, drafter, path=path)


def test_parallel_profiles_leave_every_drafter_one_deterministic_model(tmp_path, monkeypatch, capsys):
    """Two `caddtree profile` runs for two drafters (as one per core): the second re-measures the shared verify
    profile, so the first drafter's profile is stale. Loading it refits it on the new verify profile with its own
    C_d, never timing C_d again, so every process that loads it then gets the same model; a profile timed on another
    ctx grid is re-measured instead."""
    from caddtree import profile
    from caddtree.drafter import PromptLookupDrafter

    monkeypatch.setenv("CADDTREE_CACHE", str(tmp_path))
    monkeypatch.setitem(profile.PRESETS, "coarse", dict(ns=[1, 2, 4], ctxs=[16, 64], repeats=1, warmup=0))
    target = make_tiny_target(vocab=101, max_pos=256)
    a, b = PromptLookupDrafter(101, num_positions=4), PromptLookupDrafter(101, num_positions=6)
    ma = profile.ensure_cost_model(target, a, progress=False, force=True)
    mb = profile.ensure_cost_model(target, b, progress=False, force=True)
    assert ma.provenance["verify_id"] != mb.provenance["verify_id"]
    timed = []
    monkeypatch.setattr(profile, "profile_draft", lambda *args, **kw: timed.append(1) or {"draft_ms": [1.0, 1.0]})
    capsys.readouterr()
    loads = [profile.ensure_cost_model(target, a, progress=False) for _ in range(2)]
    err = capsys.readouterr().err
    assert timed == [] and err.count("rebuilding on it") == 1 and err.count("loaded") == 1
    for m in loads:
        assert m.provenance["verify_id"] == mb.provenance["verify_id"]
        assert np.array_equal(m.verify, mb.verify) and np.array_equal(m.draft, ma.draft)
    path_a = default_cost_path(target.fingerprint, profile.drafter_id(a), profile.device_label(target))
    assert not list(path_a.parent.glob("*.tmp"))
    # a drafter profile timed on another ctx grid cannot be refitted: its C_d is timed again on the shared grid
    _edit(path_a, lambda d: d["measurements"].update(ctxs=[16, 32]) or d["provenance"].update(verify_id="old"))
    m = profile.ensure_cost_model(target, a, progress=False)
    err = capsys.readouterr().err
    assert timed == [1] and "rebuilding on it" in err and "measuring C_d" in err
    assert m.measurements["draft_ms"] == [1.0, 1.0] and m.measurements["ctxs"] == mb.measurements["ctxs"]


def test_profile_measures_both_sides_of_the_kernel_passes(tmp_path, monkeypatch, capsys):
    """A kernel with passes of g rows: the grid gets n = jg - 1 and jg, the fit a pass term; a verify profile
    measured for another kernel grouping is measured again."""
    from caddtree import profile
    from caddtree.drafter import PromptLookupDrafter

    monkeypatch.setenv("CADDTREE_CACHE", str(tmp_path))
    monkeypatch.setitem(profile.PRESETS, "coarse", dict(ns=[1, 2, 8], ctxs=[16], repeats=1, warmup=0))
    target, drafter = make_tiny_target(vocab=101, max_pos=256), PromptLookupDrafter(101, num_positions=4)
    monkeypatch.setattr(profile, "verify_row_group", lambda t: 3)
    m = profile.ensure_cost_model(target, drafter, progress=False)
    assert m.measurements["ns"] == [0, 1, 2, 3, 5, 6, 8] and m.row_group == 3 and m.pass_ms.shape == (1,)
    assert check_cost_model(m) is None
    monkeypatch.setattr(profile, "verify_row_group", lambda t: 1)
    capsys.readouterr()
    m1 = profile.ensure_cost_model(target, drafter, progress=False)
    err = capsys.readouterr().err
    assert "verify cost measured" in err and "rebuilding on it" in err
    assert m1.measurements["ns"] == [0, 1, 2, 8] and m1.row_group == 1


def test_drafter_id_ignores_run_state():
    from dataclasses import dataclass

    from caddtree import profile
    from caddtree.drafter import PromptLookupDrafter

    @dataclass
    class Cfg:
        layers: int = 5

    class Stateful:
        def __init__(self, layers):
            self.c, self.ctx_len, self.kv = Cfg(layers), 0, None

    d = Stateful(5)
    before = profile.drafter_id(d)
    d.ctx_len, d.kv = 123, [torch.zeros(2)]
    assert profile.drafter_id(d) == before != profile.drafter_id(Stateful(4))
    assert profile.drafter_id(PromptLookupDrafter(100)) != profile.drafter_id(PromptLookupDrafter(100, confidence=0.5))


def test_two_stage_draft_cost_is_fitted_saved_and_loaded(tmp_path):
    meas = {"ns": [0, 1, 2, 4], "ctxs": [128, 1024], "verify_ms": [[50, 70, 75, 85], [60, 80, 88, 99]],
            "draft_ms": [15.0, 16.0], "overhead_ms": 1.0, "cheap_draft_ms": [0.3, 0.9]}
    m = fit_cost_model(meas)
    assert m.cheap_draft_ms(128) == pytest.approx(0.3) and m.cheap_draft_ms(576) == pytest.approx(0.6)
    assert m.draft_ms(128) == pytest.approx(15.0)
    back = load_cost_model(save_cost_model(m, tmp_path / "c.json"))
    assert np.allclose(back.cheap_draft, m.cheap_draft)
    one = fit_cost_model({k: v for k, v in meas.items() if k != "cheap_draft_ms"})
    assert one.cheap_draft is None and one.cheap_draft_ms(500) == one.draft_ms(500)  # one stage: C_d itself
    bad = dict(meas, cheap_draft_ms=[0.3, float("nan")])
    with pytest.raises(CaddtreeError, match="finite"):
        fit_cost_model(bad)


def test_inversion_measures_how_far_a_profile_is_from_monotone():
    from caddtree.profile import inversion
    assert inversion([[30.0, 31.0, 31.0, 40.0], [50.0, 52.0, 60.0, 61.0]]) == 0.0
    assert inversion([[30.0, 45.0, 36.0, 40.0]]) == pytest.approx(45 / 36 - 1)  # a smaller tree over a larger one
    assert inversion([[30.0]]) == 0.0


@pytest.mark.parametrize("disturbed_checks, sweeps", [(2, 2 + 2), (100, 3 * 2)])
def test_profile_takes_more_sweeps_while_the_medians_look_disturbed(monkeypatch, capsys, disturbed_checks, sweeps):
    """Extra sweeps while a smaller tree's median is > 10% over a larger one's, at most 3x the repeats; a profile
    still disturbed then says so in one line."""
    from caddtree import profile
    calls = []
    real = profile.inversion
    monkeypatch.setattr(profile, "inversion", lambda v: (calls.append(1), 1.0 if len(calls) <= disturbed_checks
                                                                        else 0.0 * real(v))[1])
    monkeypatch.setattr(profile, "busy", lambda t: 0.0)  # real timings of a tiny model may look busy: not tested here
    m = profile.profile_verify(make_tiny_target(vocab=101, max_pos=256), [1, 2], [16], repeats=2, warmup=1,
                               progress=False)
    assert m["sweeps"] == sweeps and m["repeats"] == 2
    assert ("stayed disturbed" in capsys.readouterr().err) == (sweeps == 3 * 2)


def test_profile_times_no_plain_step_right_after_a_larger_tree(monkeypatch):
    """A timed plain step (the n = 0 cell) follows a plain step, as in plain decoding: never the previous row's
    largest tree, whose logits and activations push the weights out of cache (25% slower on a Xeon whose L3 holds
    the model), so that C_v(0) is not overpriced against the trees CaDDTree weighs it with."""
    from caddtree import profile
    events = []  # tree sizes of verify calls, "t" for each clock read
    real_verify, real_now = profile.verify_tree, profile.now

    def verify(target, cache, root, tree):
        events.append(len(tree))
        return real_verify(target, cache, root, tree)

    def clock(device):
        events.append("t")
        return real_now(device)
    monkeypatch.setattr(profile, "verify_tree", verify)
    monkeypatch.setattr(profile, "now", clock)
    monkeypatch.setattr(profile, "busy", lambda t: 0.0)
    monkeypatch.setattr(profile, "inversion", lambda v: 0.0)
    profile.profile_verify(make_tiny_target(vocab=101, max_pos=512), [0, 1, 4, 32], [16, 64], repeats=2, warmup=1,
                           progress=False)
    # clock reads pair up (start, end): a verify is timed when an odd number of reads precede it
    timed_plain = [i for i, e in enumerate(events) if e == 0 and events[:i].count("t") % 2 == 1]
    assert len(timed_plain) == 3 * 2  # one per sweep and context
    before = [next((e for e in reversed(events[:i]) if e != "t"), None) for i in timed_plain]
    assert before == [0] * len(before), before  # each after an untimed plain verify of its own


def test_busy_is_how_far_timings_stand_above_their_fastest():
    from caddtree.profile import busy
    quiet = [[[30.0, 40.0]], [[31.0, 41.0]], [[32.0, 42.0]]]  # [repeats, ctxs, ns]
    assert busy(quiet) == pytest.approx(np.median([31 / 30, 41 / 40]) - 1)
    loaded = [[[30.0, 40.0]], [[45.0, 60.0]], [[48.0, 62.0]]]  # one quiet sweep, two under load
    assert busy(loaded) > 0.4
    assert busy([5.0, 5.0, 5.0]) == 0.0 and busy([]) == 0.0  # flat list of draft calls; nothing timed yet


@pytest.mark.parametrize("busy_checks, sweeps", [(2, 2 + 2), (100, 3 * 2)])
def test_profile_takes_more_sweeps_while_the_machine_looks_busy(monkeypatch, capsys, busy_checks, sweeps):
    """Medians standing > BUSY over their minima (load over most sweeps bends the curve without any inversion)
    also ask for more sweeps, at most 3x the repeats, and a profile still busy then says so in one line."""
    from caddtree import profile
    calls = []
    monkeypatch.setattr(profile, "busy", lambda t: (calls.append(1), 1.0 if len(calls) <= busy_checks else 0.0)[1])
    monkeypatch.setattr(profile, "inversion", lambda v: 0.0)
    m = profile.profile_verify(make_tiny_target(vocab=101, max_pos=256), [1, 2], [16], repeats=2, warmup=1,
                               progress=False)
    assert m["sweeps"] == sweeps and m["busy"] == (1.0 if sweeps == 3 * 2 else 0.0)
    assert ("stayed busy" in capsys.readouterr().err) == (sweeps == 3 * 2)


def test_draft_timing_takes_more_calls_while_the_machine_looks_busy(monkeypatch):
    from caddtree import profile
    from caddtree.drafter import PromptLookupDrafter
    target = make_tiny_target(vocab=101, max_pos=512)
    steps = []
    forward = target.forward
    monkeypatch.setattr(target, "forward", lambda ids, cache, *a, **k: (steps.append(1), forward(ids, cache, *a,
                                                                                                  **k))[1])
    checks = []
    monkeypatch.setattr(profile, "busy", lambda t: (checks.append(1), 1.0 if len(checks) <= 3 else 0.0)[1])
    monkeypatch.setattr(profile, "BUSY_MIN_S", 0.0)  # the tiny drafter's calls take microseconds
    profile.profile_draft(target, PromptLookupDrafter(101, num_positions=4), [20], repeats=2, warmup=1)
    assert len(steps) == 1 + 1 + profile.DRAFT_REPEATS + 3  # prefill, warm-up, the repeats, 3 more while busy


def test_draft_timing_repeats_and_follows_a_target_step(monkeypatch):
    """C_d is the median of at least DRAFT_REPEATS timed calls, each right after a one-token target step (the cache
    state decoding drafts in), and the step leaves the profile's cache as it was."""
    from caddtree import profile
    from caddtree.drafter import PromptLookupDrafter

    target = make_tiny_target(vocab=101, max_pos=256)
    calls, lengths = [], []
    forward = target.forward

    def counting_forward(ids, cache, *a, **k):
        calls.append(int(ids.shape[0]))
        lengths.append(cache.get_seq_length())
        return forward(ids, cache, *a, **k)

    monkeypatch.setattr(target, "forward", counting_forward)
    meas = profile.profile_draft(target, PromptLookupDrafter(101, num_positions=4), [20], repeats=2, warmup=1)
    assert len(meas["draft_ms"]) == 1 and meas["draft_ms"][0] > 0
    assert calls == [20] + [1] * (1 + profile.DRAFT_REPEATS)  # prefill, then one step before each call
    assert lengths == [0] + [20] * (1 + profile.DRAFT_REPEATS)  # each step cropped off again


def test_profile_of_an_older_smaller_preset_is_measured_again(tmp_path, monkeypatch, capsys):
    """A cached verify profile lacking sizes or sweeps its preset now asks for is measured again (the coarse preset
    grew from 3 to 9 sweeps); the drafter's profile is rebuilt on it with its C_d kept; a `full` one is kept."""
    from caddtree import profile
    from caddtree.drafter import PromptLookupDrafter

    monkeypatch.setenv("CADDTREE_CACHE", str(tmp_path))
    target, drafter = make_tiny_target(vocab=101, max_pos=256), PromptLookupDrafter(101, num_positions=4)
    monkeypatch.setitem(profile.PRESETS, "coarse", dict(ns=[1, 2, 4], ctxs=[16], repeats=1, warmup=0))
    m = profile.ensure_cost_model(target, drafter, progress=False)
    assert profile.covers_preset(m.measurements, "coarse") and profile.covers_preset(m.measurements, None)
    monkeypatch.setitem(profile.PRESETS, "coarse", dict(ns=[1, 2, 4], ctxs=[16], repeats=2, warmup=0))
    assert not profile.covers_preset(m.measurements, "coarse")
    capsys.readouterr()
    m2 = profile.ensure_cost_model(target, drafter, progress=False)
    err = capsys.readouterr().err
    assert "verify cost measured" in err and "rebuilding on it" in err and "kept" in err
    assert m2.measurements["repeats"] == 2 and m2.measurements["draft_ms"] == m.measurements["draft_ms"]
    monkeypatch.setitem(profile.PRESETS, "coarse", dict(ns=[1, 2, 3, 4], ctxs=[16], repeats=2, warmup=0))
    m3 = profile.ensure_cost_model(target, drafter, progress=False)  # one size more
    assert "verify cost measured" in capsys.readouterr().err and m3.measurements["ns"] == [0, 1, 2, 3, 4]
    profile.ensure_cost_model(target, drafter, progress=False)
    assert "loaded" in capsys.readouterr().err  # now up to date
    monkeypatch.setitem(profile.PRESETS, "full", dict(ns=[1, 2], ctxs=[16], repeats=1, warmup=0))
    m4 = profile.ensure_cost_model(target, drafter, progress=False, preset="full", force=True)
    assert m4.provenance["preset"] == "full"  # judged by its own preset, not the coarse one asked for below
    profile.ensure_cost_model(target, drafter, progress=False)
    assert "loaded" in capsys.readouterr().err


def test_scalar_costs_blend_as_the_curve_tables_do():
    """C_d, its first stage and the overhead are blended in Python floats (`_scalar_blend`, every round) with the
    same float64 operations as `_ctx_blend` on their tables: equal to the last bit, inside the grid and past it."""
    rng = np.random.default_rng(0)
    ctxs = [64, 300, 1024, 4096]
    cost = CostModel(ctxs, rng.uniform(5, 20, (4, 9)), np.zeros(9), rng.uniform(1, 9, 4), rng.uniform(0.1, 3, 4),
                     cheap_draft=rng.uniform(0.05, 0.5, 4))
    for ctx in [1, 64, 65.5, 299, 300, 777, 4095, 4096, 5000, 12345.25]:
        for name, got in (("draft", cost.draft_ms(ctx)), ("overhead", cost.overhead_ms(ctx)),
                          ("cheap_draft", cost.cheap_draft_ms(ctx))):
            table = getattr(cost, name)
            assert got == float(cost._ctx_blend(table, cost._scalar_slope(table), ctx)), (name, ctx)


def test_overhead_per_node_prices_each_tree_node(tmp_path):
    """The overhead's per-node part o_n (`overhead_node_ms`) adds o_n · n to what a tree of n nodes costs (nothing
    to the plain step), round-trips through the file, defaults to 0 for files saved before it, and is refused when
    negative or not finite."""
    base = fit_cost_model(REF, PROV)
    m = fit_cost_model({**REF, "overhead_node_ms": 0.25}, PROV)
    assert base.overhead_node == 0.0 and m.overhead_node == 0.25 and np.array_equal(m.overhead, base.overhead)
    for ctx in (100, 512, 1000, 5000):
        grid = np.arange(m.max_nodes + 1)
        assert np.allclose(m.verify_curve(ctx), base.verify_curve(ctx) + 0.25 * grid, rtol=0, atol=1e-9)
        assert m.plain_verify_ms(ctx) == base.plain_verify_ms(ctx)
        assert m.round_ms(5, ctx) == pytest.approx(base.round_ms(5, ctx) + 1.25)
        assert m.row_slope_floor(ctx) == pytest.approx(base.row_slope_floor(ctx) + 0.25)
    path = save_cost_model(m, tmp_path / "m.json")
    assert load_cost_model(path).overhead_node == 0.25
    _edit(path, lambda d: d["fit"].pop("overhead_node_ms"))  # saved before the per-node part
    assert load_cost_model(path).overhead_node == 0.0
    for bad in (-0.1, float("nan")):
        with pytest.raises(CaddtreeError, match="overhead_node_ms"):
            fit_cost_model({**REF, "overhead_node_ms": bad}, PROV)
    m.overhead_node = -1.0
    assert "per-node overhead" in check_cost_model(m)


def test_plain_step_overhead_prices_only_the_plain_option(tmp_path):
    """A plain step's own overhead o_plain (`overhead_plain_ms`) replaces o for n = 0 only: `verify_curve`'s first
    entry moves by o_plain - o, so every round priced as overhead + curve pays o_plain at n = 0 and o at n >= 1; it
    changes the speculate-or-not choice where a 1-node tree is near break-even; it round-trips through the file,
    defaults to o for profiles saved before it, and is refused when not finite."""
    from caddtree.budget import TreeStop, choose_tree_size
    base = fit_cost_model(REF, PROV)
    m = fit_cost_model({**REF, "overhead_plain_ms": [0.1, 0.1, 0.1]}, PROV)
    assert base.overhead_plain is None and np.array_equal(base.plain_overhead, base.overhead)
    for ctx in (100, 512, 1000, 5000):
        o = base.overhead_ms(ctx)
        got, ref = m.verify_curve(ctx), base.verify_curve(ctx)
        assert got[0] == pytest.approx(ref[0] + 0.1 - o, abs=1e-4) and np.array_equal(got[1:], ref[1:])
        assert m.plain_verify_ms(ctx) == float(got[0]) and m.plain_overhead_ms(ctx) == pytest.approx(0.1, abs=1e-4)
        assert m.round_ms(0, ctx) == pytest.approx(base.round_ms(0, ctx) - o + 0.1, abs=1e-4)
        assert m.plain_round_ms(ctx) == pytest.approx(ref[0] + 0.1, abs=1e-4)
        assert m.plain_step_ms(ctx) == pytest.approx(base.plain_step_ms(ctx)) == pytest.approx(ref[0])
        assert m.row_slope_floor(ctx) >= base.row_slope_floor(ctx) - 1e-12
    # one node worth 0.6 of the 1-node tree's extra cost at plain-step prices under o: a tree; under o_plain: plain
    ctx = 512
    c0, c1 = base.round_ms(0, ctx), base.round_ms(1, ctx)
    gap = (c1 - c0) / c0  # break-even δ under o (θ_1 = θ_0)
    lw = np.log([gap * 1.02])
    assert choose_tree_size(lw, base, ctx).n == 1 and choose_tree_size(lw, m, ctx).n == 0
    for cost in (base, m):  # the stop rule keeps the same choice
        stop = TreeStop(cost, ctx)
        stop(float(lw[0]))
        assert stop.choice().n == choose_tree_size(lw, cost, ctx).n
    path = save_cost_model(m, tmp_path / "m.json")
    assert np.array_equal(load_cost_model(path).overhead_plain, m.overhead_plain)
    _edit(path, lambda d: d["fit"].pop("overhead_plain_ms"))  # saved before it
    assert load_cost_model(path).overhead_plain is None
    with pytest.raises(CaddtreeError, match="malformed|finite"):
        fit_cost_model({**REF, "overhead_plain_ms": [0.1, float("nan"), 0.1]}, PROV)
    m.overhead_plain = np.array([0.1, 0.2])
    assert "shapes" in check_cost_model(m)


def test_overhead_line_through_two_tree_sizes():
    """The profile's overhead at a small and a full-budget tree -> the per-node part (median over ℓ of the slopes,
    never negative) and the rest per ℓ (never negative); one size: no per-node part."""
    from caddtree.profile import overhead_line
    got = overhead_line([8, 64], [[1.0, 1.56], [1.2, 1.76], [1.1, 3.0]])
    assert got["overhead_node_ms"] == pytest.approx(0.01)  # slopes 0.01, 0.01, 0.0339: the median
    assert got["overhead_ms"] == pytest.approx([0.92, 1.12, 1.02])
    assert got["overhead_sizes"] == [8, 64] and got["overhead_by_size_ms"][2] == [1.1, 3.0]
    flat = overhead_line([8, 64], [[1.0, 0.9]])  # the big tree measured cheaper (noise): no negative slope
    assert flat["overhead_node_ms"] == 0.0 and flat["overhead_ms"] == [1.0]
    assert overhead_line([4], [[0.7]]) == {"overhead_ms": [0.7], "overhead_node_ms": 0.0, "overhead_sizes": [4],
                                           "overhead_by_size_ms": [[0.7]]}
    assert overhead_line([4], [[0.7]], [0.21234])["overhead_plain_ms"] == [0.2123]  # a plain step's, as measured
    tiny = overhead_line([8, 64], [[0.01, 1.2]])  # a rest below zero on the line is clamped
    assert tiny["overhead_ms"] == [0.0] and tiny["overhead_node_ms"] == pytest.approx(1.19 / 56)


def test_profile_times_the_overhead_at_two_tree_sizes(tmp_path, monkeypatch, capsys):
    """The verify profile times a round's bookkeeping at the largest grid size <= OVERHEAD_SMALL and at the full
    budget; a verify profile saved before that (no per-node part) is measured again, the drafter's C_d kept."""
    from caddtree import profile
    from caddtree.drafter import PromptLookupDrafter

    monkeypatch.setenv("CADDTREE_CACHE", str(tmp_path))
    monkeypatch.setattr(profile, "OVERHEAD_SMALL", 4)
    monkeypatch.setitem(profile.PRESETS, "coarse", dict(ns=[1, 2, 4, 12], ctxs=[16, 40], repeats=1, warmup=0))
    target, drafter = make_tiny_target(vocab=101, max_pos=256), PromptLookupDrafter(101, num_positions=4)
    m = profile.ensure_cost_model(target, drafter, progress=False)
    meas = m.measurements
    assert meas["overhead_sizes"] == [4, 12] and np.asarray(meas["overhead_by_size_ms"]).shape == (2, 2)
    assert np.all(np.asarray(meas["overhead_by_size_ms"]) > 0) and meas["overhead_node_ms"] >= 0
    assert m.overhead_node == meas["overhead_node_ms"] and len(meas["overhead_ms"]) == 2
    assert len(meas["overhead_plain_ms"]) == 2 and np.all(np.asarray(meas["overhead_plain_ms"]) > 0)
    assert np.array_equal(m.overhead_plain, np.maximum.accumulate(m.overhead_plain))  # fitted non-decreasing in ℓ
    vpath = profile.verify_profile_path(target)
    path = default_cost_path(target.fingerprint, profile.drafter_id(drafter), profile.device_label(target))
    for key in ("overhead_node_ms", "overhead_plain_ms"):  # profiles saved before either are measured again
        _edit(vpath, lambda d: d["measurements"].pop(key))
        _edit(path, lambda d: d["measurements"].pop(key))
        capsys.readouterr()
        m2 = profile.ensure_cost_model(target, drafter, progress=False)
        err = capsys.readouterr().err
        assert "verify cost measured" in err and "kept" in err and key in m2.measurements


def test_plain_step_cost_and_row_slope_floor_without_the_curve():
    """`plain_verify_ms` is `verify_curve(ctx)[0]` to the last bit, and `row_slope_floor` never exceeds the least
    (C_v(n) - C_v(0)) / n of the blended curve (what lets `TreeStop.plain_only` skip its loop), in the grid and past."""
    rng = np.random.default_rng(1)
    ctxs = [64, 300, 1024, 4096]
    verify = np.cumsum(rng.uniform(0, 3, (4, 33)), axis=1) + np.arange(4)[:, None] * rng.uniform(5, 9)  # C_v rises
    cost = CostModel(ctxs, verify, rng.uniform(0, 0.01, 33), [1.0] * 4, [0.5] * 4, row_group=8, pass_ms=[1, 2, 3, 4],
                     overhead_node=0.03)
    for ctx in [1, 64, 100.5, 300, 2000, 4096, 9000]:
        curve = cost.verify_curve(ctx)
        assert cost.plain_verify_ms(ctx) == float(curve[0])
        assert cost.row_slope_floor(ctx) <= ((curve[1:] - curve[0]) / np.arange(1, 33)).min() + 1e-12 * curve[-1]
