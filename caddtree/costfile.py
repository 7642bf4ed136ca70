"""A cost model on disk: its JSON file (format `caddtree-cost/1`: provenance, the raw measurements, the fit), its
place in the per-user cache, and its plot. The fitting itself is `costmodel` (pure).

A profile is keyed by (target fingerprint, drafter id, device label); `load_cost_model` refuses a file made for
another target or drafter, of another format, or whose fit breaks the shape rules (`costmodel.check_cost_model`).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from caddtree.costmodel import CostModel, check_cost_model
from caddtree.errors import CaddtreeError
from caddtree.files import atomic_write_text, cache_dir

FORMAT = "caddtree-cost/1"


def save_cost_model(model: CostModel, path) -> Path:
    """Write the profile atomically (an interrupted save never leaves a corrupt profile behind)."""
    doc = {"format": FORMAT, "provenance": model.provenance, "measurements": model.measurements,
           "fit": {"ctxs": model.ctxs, "verify_ms": model.verify.tolist(), "verify_slope_ms_per_token":
                   model.verify_slope.tolist(), "draft_ms": model.draft.tolist(),
                   "overhead_ms": model.overhead.tolist(), "row_group": model.row_group,
                   "pass_ms": model.pass_ms.tolist(), "verify_fit": model.verify_fit,
                   "overhead_node_ms": model.overhead_node,
                   **({} if model.overhead_plain is None else {"overhead_plain_ms": model.overhead_plain.tolist()}),
                   **({} if model.cheap_draft is None else {"cheap_draft_ms": model.cheap_draft.tolist()})}}
    return atomic_write_text(path, json.dumps(doc, indent=1, default=_jsonable))


def _jsonable(o):
    if isinstance(o, np.ndarray) or hasattr(o, "tolist"):
        return o.tolist()
    return str(o)


def load_cost_model(path, target_fingerprint: str | None = None, drafter_id: str | None = None) -> CostModel:
    """Load a saved profile; CaddtreeError (one line: problem + fix) if it is missing, corrupt, of another format
    version, made for another target/drafter, or its fit is not convex/monotone."""
    path = Path(path)
    redo = f"delete {path} and re-run `caddtree profile`"
    if not path.is_file():
        raise CaddtreeError(f"no cost profile at {path}: run `caddtree profile` (or let the first run profile)")
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CaddtreeError(f"cost profile {path} is corrupt ({type(e).__name__}): {redo}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        got = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise CaddtreeError(f"cost profile {path} has format {got!r}, expected {FORMAT!r}: {redo}")
    prov = doc.get("provenance") or {}
    for key, want in (("target_fingerprint", target_fingerprint), ("drafter_id", drafter_id)):
        if want is not None and prov.get(key) != want:
            raise CaddtreeError(f"cost profile {path} was made for {key.split('_')[0]} {prov.get(key)!r}, not "
                                f"{want!r}: profile this target/drafter (`caddtree profile`) or pass its own profile")
    try:
        fit = doc["fit"]
        model = CostModel(fit["ctxs"], fit["verify_ms"], fit["verify_slope_ms_per_token"], fit["draft_ms"],
                          fit["overhead_ms"], fit.get("cheap_draft_ms"), fit.get("row_group", 1),
                          fit.get("pass_ms"), fit.get("verify_fit", "convex"), fit.get("overhead_node_ms", 0.0),
                          fit.get("overhead_plain_ms"), measurements=doc.get("measurements") or {},
                          provenance=prov)
    except (KeyError, TypeError, ValueError) as e:
        raise CaddtreeError(f"cost profile {path} is corrupt (bad fit: {type(e).__name__} {e}): {redo}") from None
    problem = check_cost_model(model)
    if problem:
        raise CaddtreeError(f"cost profile {path} is invalid ({problem}): {redo}")
    return model


def default_cost_path(target_fingerprint: str, drafter_id: str, device: str) -> Path:
    """Per-user cache path of the profile of (target, drafter, device); names are sanitised for the filesystem."""
    safe = lambda s: re.sub(r"[^A-Za-z0-9._-]+", "_", str(s))[:80]  # noqa: E731
    return cache_dir() / "profiles" / f"{safe(target_fingerprint)}__{safe(drafter_id)}__{safe(device)}.json"


def plot_cost_model(model: CostModel, path, max_curves: int = 6) -> Path:
    """PNG: measured C_v points and the fitted curve vs n for several ctx (left), C_d and overhead vs ctx (right)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    m = model.measurements
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    picks = sorted(set(np.linspace(0, len(model.ctxs) - 1, min(max_curves, len(model.ctxs))).round().astype(int)))
    grid = np.arange(model.max_nodes + 1)
    for k, i in enumerate(picks):
        color = f"C{k}"
        ax.plot(grid, model.verify_curve(model.ctxs[i]), "-", color=color, label=f"fit ℓ={model.ctxs[i]}")
        if "verify_ms" in m and i < len(m["verify_ms"]):
            ax.plot(m["ns"], m["verify_ms"][i], "o", color=color, ms=4)
    ax.set(xlabel="tree nodes n (forward runs n+1 tokens)", ylabel="C_v(n; ℓ) ms", title="verify cost: points=measured")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    ax2.plot(model.ctxs, model.draft, "-", color="C0", label="C_d fit")
    ax2.plot(model.ctxs, model.overhead, "-", color="C1", label="overhead fit")
    if "draft_ms" in m:
        ax2.plot(m["ctxs"], np.broadcast_to(m["draft_ms"], (len(m["ctxs"]),)), "o", color="C0", ms=4)
    if "overhead_ms" in m:
        ax2.plot(m["ctxs"], np.broadcast_to(m["overhead_ms"], (len(m["ctxs"]),)), "o", color="C1", ms=4)
    ax2.set(xlabel="context length ℓ", ylabel="ms", title="per-round draft cost and overhead")
    ax2.legend(fontsize=8)
    ax2.grid(alpha=0.3)
    prov = model.provenance
    fig.suptitle(f"{prov.get('target_fingerprint', '?')} / {prov.get('drafter_id', '?')} on "
                 f"{prov.get('cpu', prov.get('device', '?'))}, {prov.get('torch_threads', '?')} threads", fontsize=9)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
