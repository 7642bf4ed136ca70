"""A run's plots: speed-up by dataset and method, CaDDTree's tree size per round, τ and ms/token against the fixed
budget. matplotlib is imported where a plot is drawn (plots are optional output).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from caddtree.bench.methods import method_family


def write_plots(records: list[dict], summary: dict, out_dir) -> list[Path]:
    """speedup.png, caddtree_budget_hist.png (where CaDDTree ran), budget_sweep.png (where fixed budgets ran)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    out_dir = Path(out_dir)
    rows = [r for r in summary["rows"] if r["n"]]
    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    methods = [m for m in dict.fromkeys(r["method"] for r in rows) if m != "ar"]
    if not datasets:
        return []
    paths = [_speedup_plot(plt, rows, datasets, methods, out_dir)]
    ok = [r for r in records if r.get("method") == "caddtree" and r.get("tree_sizes")]
    if ok:
        paths.append(_budget_hist(plt, ok, datasets, out_dir))
    fixed = [r for r in rows if method_family(r["method"])[0] == "ddtree"]
    if fixed:
        paths.append(_budget_sweep(plt, matplotlib.ticker, rows, fixed, datasets, out_dir))
    return paths


def _speedup_plot(plt, rows, datasets, methods, out_dir: Path) -> Path:
    """Speed-up by dataset and method."""
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(datasets) * max(1, len(methods)) / 3), 4))
    w = 0.8 / max(len(methods), 1)
    for j, m in enumerate(methods):
        ys = [next((r["speedup"] or 0 for r in rows if r["dataset"] == d and r["method"] == m), 0) for d in datasets]
        ax.bar(np.arange(len(datasets)) + j * w, ys, w, label=m)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(np.arange(len(datasets)) + w * (len(methods) - 1) / 2, datasets, rotation=20)
    ax.set(ylabel="speed-up vs ar (median ms/token)", title="speed-up by dataset and method")
    ax.legend(fontsize=7, ncol=2)
    return _save(fig, out_dir / "speedup.png")


def _budget_hist(plt, ok, datasets, out_dir: Path) -> Path:
    """CaDDTree's chosen tree size per round, per dataset."""
    ds = [d for d in datasets if any(r["dataset"] == d for r in ok)]
    cols = min(4, len(ds))
    nrows = (len(ds) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(3.2 * cols, 2.6 * nrows), squeeze=False)
    for a, d in zip(axes.flat, ds):
        sizes = [s for r in ok if r["dataset"] == d for s in r["tree_sizes"]]
        a.hist(sizes, bins=np.linspace(-0.5, max(sizes) + 0.5, min(30, max(sizes) + 1) + 1), color="C2")
        a.set(title=f"{d} (mean {np.mean(sizes):.1f})", xlabel="tree size n")
    for a in list(axes.flat)[len(ds):]:
        a.axis("off")
    fig.suptitle("CaDDTree budget per round")
    return _save(fig, out_dir / "caddtree_budget_hist.png")


def _budget_sweep(plt, ticker, rows, fixed, datasets, out_dir: Path) -> Path:
    """τ and ms/token against the fixed budget, CaDDTree marked at its mean tree size."""
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    for k, d in enumerate(datasets):
        pts = sorted((method_family(r["method"])[1], r["tau"], r["ms_per_token"])
                     for r in fixed if r["dataset"] == d)
        if not pts:
            continue
        b, tau, ms = zip(*pts)
        a1.plot(b, tau, "o-", color=f"C{k}", label=d)
        a2.plot(b, ms, "o-", color=f"C{k}", label=d)
        c = next((r for r in rows if r["dataset"] == d and r["method"] == "caddtree"), None)
        if c and c["tree_size_mean"] and c["tau"]:
            a1.plot(c["tree_size_mean"], c["tau"], "*", color=f"C{k}", ms=14, mec="k")
            a2.plot(c["tree_size_mean"], c["ms_per_token"], "*", color=f"C{k}", ms=14, mec="k")
    for a, yl in ((a1, "τ (tokens per round)"), (a2, "ms/token (median)")):
        a.set_xscale("log", base=2)
        a.xaxis.set_major_formatter(ticker.FuncFormatter(lambda x, _: f"{x:g}"))
        a.xaxis.set_minor_formatter(ticker.NullFormatter())
        a.set(xlabel="fixed tree budget B (★ = CaDDTree at its mean tree size)", ylabel=yl)
        a.grid(alpha=0.3)
    a1.legend(fontsize=7)
    return _save(fig, out_dir / "budget_sweep.png")


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt  # optional output: imported where a plot is drawn
    plt.close(fig)
    return path
