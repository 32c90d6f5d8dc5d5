"""Figures of `sparsegp experiment bui2017`: metric − exact GP against M (the paper's Fig. 3),
pairwise win-rate histograms and matrix (Fig. 4A), average ranks (Fig. 4B, 5) and
per-data-set curves (Figs. 17-22). Methods are coloured by α (VFE dark, EP yellow), with
their own line style and marker: the block methods (PITC, block PEP) dashed, classification's
SGPC at α = 10⁻³ dotted."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib
import numpy as np

from ..shared.plotting import new_figure, save
from .analysis import WinRate
from .grid import Method

LABELS = {"smse": "SMSE", "smll": "SMLL", "nlml": "NLML", "error_rate": "test error rate",
          "nll": "test NLL"}


def colour(m: Method) -> tuple[float, ...]:
    return matplotlib.colormaps["viridis"](0.92 * m.power)


def style(m: Method) -> dict:
    """Colour by α, the method's own line style and marker (block methods: dashed, squares)."""
    return {"color": colour(m), "ls": m.line, "marker": m.marker}


def _m_axis(ax, Ms: Sequence[int], fontsize: int = 9) -> None:
    ax.set_xscale("log")
    ax.minorticks_off()
    ax.set_xticks(list(Ms), [str(M) for M in Ms])
    ax.set_xlabel("M", fontsize=fontsize)


def _legend(fig, axes: np.ndarray) -> None:
    """One legend for the methods, outside the panels on the right."""
    handles, labels = axes.flat[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside right upper", fontsize=7)


def plot_synthetic(diffs: dict[str, dict[tuple[str, int], np.ndarray]], methods: Sequence[Method],
                   Ms: Sequence[int], path: Path, title: str) -> Path:
    """Panels per metric: mean (± standard error) over data sets of metric − GP against M."""
    fig, axes = new_figure(1, len(diffs), (4.2 * len(diffs) + 1.2, 3.6))
    for ax, (metric, d) in zip(axes[0], diffs.items()):
        for m in methods:
            xs = [M for M in Ms if d.get((m.name, M), np.empty(0)).size]
            if not xs:
                continue
            v = [d[(m.name, M)] for M in xs]
            mean = np.array([a.mean() for a in v])
            se = np.array([a.std(ddof=1) / np.sqrt(a.size) if a.size > 1 else 0.0 for a in v])
            ax.errorbar(xs, mean, yerr=se, **style(m), ms=3, lw=1.2,
                        capsize=2, label=m.name)
        ax.axhline(0.0, color="0.4", lw=0.8, ls="--")
        _m_axis(ax, Ms)
        ax.set_title(f"{LABELS[metric]} − exact GP", fontsize=10)
    _legend(fig, axes)
    fig.suptitle(title, fontsize=10)
    return save(fig, path)


def plot_pair_histograms(rates: Sequence[WinRate], path: Path, title: str) -> Path:
    """One histogram per (pair, metric) of first − second, with the win fractions."""
    metrics = sorted({r.metric for r in rates}, key=list(LABELS).index)
    pairs = list(dict.fromkeys((r.first, r.second) for r in rates))
    fig, axes = new_figure(len(metrics), len(pairs), (3.6 * len(pairs), 2.8 * len(metrics)))
    for r in rates:
        ax = axes[metrics.index(r.metric), pairs.index((r.first, r.second))]
        d = r.differences
        if d.size:
            lim = np.quantile(np.abs(d), 0.95) or 1e-12
            ax.hist(np.clip(d, -lim, lim), bins=30, color="C0", alpha=0.8)
        ax.axvline(0.0, color="k", lw=0.8)
        ax.set_title(f"{LABELS[r.metric]}: {r.first} − {r.second}", fontsize=9)
        ax.text(0.02, 0.95, f"{r.first} better: {r.wins}/{r.n}\n{r.second} better: {r.losses}/{r.n}",
                transform=ax.transAxes, va="top", fontsize=7)
        ax.set_xlabel("difference (clipped at the 95% quantile of |d|)", fontsize=7)
    fig.suptitle(title, fontsize=10)
    return save(fig, path)


def plot_win_matrices(matrices: dict[str, np.ndarray], names: Sequence[str], path: Path,
                      title: str) -> Path:
    """Heat maps: the fraction of groups where the row's method beats the column's."""
    fig, axes = new_figure(1, len(matrices), (5.0 * len(matrices), 4.4))
    for ax, (metric, W) in zip(axes[0], matrices.items()):
        im = ax.imshow(W, vmin=0, vmax=1, cmap="RdBu_r")
        ax.set_xticks(range(len(names)), names, rotation=60, fontsize=7)
        ax.set_yticks(range(len(names)), names, fontsize=7)
        for i in range(len(names)):
            for j in range(len(names)):
                if np.isfinite(W[i, j]):
                    ax.text(j, i, f"{W[i, j]:.2f}", ha="center", va="center", fontsize=5.5)
        ax.set_title(f"{LABELS[metric]}: row beats column", fontsize=9)
        fig.colorbar(im, ax=ax, shrink=0.8)
    fig.suptitle(title, fontsize=10)
    return save(fig, path)


def plot_ranks(ranks: dict[str, np.ndarray], methods: Sequence[Method], Ms: Sequence[int],
               path: Path, title: str) -> Path:
    """Mean rank of each method against M, one panel per metric."""
    fig, axes = new_figure(1, len(ranks), (4.4 * len(ranks) + 1.2, 3.6))
    for ax, (metric, R) in zip(axes[0], ranks.items()):
        for i, m in enumerate(methods):
            ax.plot(Ms, R[i], **style(m), ms=3, lw=1.2, label=m.name)
        _m_axis(ax, Ms)
        ax.set_ylabel("mean rank (1 = best)")
        ax.set_title(LABELS[metric], fontsize=10)
    _legend(fig, axes)
    fig.suptitle(title, fontsize=10)
    return save(fig, path)


def plot_dataset_curves(curves: dict[str, tuple[np.ndarray, np.ndarray]],
                        methods: Sequence[Method], Ms: Sequence[int], metric: str, path: Path,
                        title: str) -> Path:
    """A panel per data set: mean (± standard error) over splits of `metric` against M."""
    cols = min(4, len(curves))
    rows = -(-len(curves) // cols)
    fig, axes = new_figure(rows, cols, (3.6 * cols + 1.2, 2.9 * rows))
    for ax in axes.flat[len(curves):]:
        ax.set_visible(False)
    for ax, (name, (mean, se)) in zip(axes.flat, curves.items()):
        for i, m in enumerate(methods):
            ax.errorbar(Ms, mean[i], yerr=se[i], **style(m), ms=2.5, lw=1.0,
                        capsize=1.5, label=m.name)
        _m_axis(ax, Ms, 8)
        ax.set_title(name, fontsize=9)
        ax.set_ylabel(LABELS[metric], fontsize=8)
    _legend(fig, axes)
    fig.suptitle(title, fontsize=10)
    return save(fig, path)
