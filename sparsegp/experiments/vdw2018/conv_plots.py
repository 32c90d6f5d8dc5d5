"""Figures of `sparsegp experiment vdw2018-conv`: inducing patches, patch weights, traces.

The inducing patches are shown sorted by the posterior mean of their inducing outputs,
E_q[u_m] = E_q[g(z_m)] (van der Wilk 2018, Fig. 5.4): the patch-response function's mean at
the patch, in the units of f. The models are whitened (u = L v, L = chol Kuu), so this is
L·q_mu, not q_mu itself (q_mu is the mean of the whitened v).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..shared.plotting import new_figure, save


def inducing_output_means(model: Any) -> np.ndarray:
    """E_q[u] [M] of a single-output model with inducing patches (u-space, not whitened v)."""
    with torch.no_grad():
        return model.posterior().q_mu[:, 0].cpu().numpy()


def plot_inducing_patches(models: Sequence[tuple[str, Any]], path: Path, title: str) -> Path:
    """One row of inducing patches per model, sorted by E_q[u_m] (written above each patch);
    grey levels on a common scale per row (the patches live in pixel space, [0, 1] at start)."""
    M = max(m.feature.num_inducing for _, m in models)
    cols = min(M, 25)
    rows_per = -(-M // cols)
    fig, axes = new_figure(rows_per * len(models), cols, (0.62 * cols + 0.4,
                                                          0.95 * rows_per * len(models) + 0.5))
    for ax in axes.flat:
        ax.set_axis_off()
    for r, (name, model) in enumerate(models):
        h, w = model.kernel.patch_shape
        Z = model.feature.Z.detach().cpu().numpy()
        mean = inducing_output_means(model)
        order = np.argsort(mean)
        lo, hi = float(Z.min()), float(Z.max())
        for i, m in enumerate(order):
            ax = axes[r * rows_per + i // cols, i % cols]
            ax.imshow(Z[m].reshape(h, w), cmap="gray", vmin=lo, vmax=hi, interpolation="nearest")
            ax.set_title(f"{mean[m]:.2g}", fontsize=6, pad=2)
        axes[r * rows_per, 0].text(-0.9, 0.5, name, transform=axes[r * rows_per, 0].transAxes,
                                   ha="right", va="center", fontsize=8, rotation=90)
    fig.suptitle(title, fontsize=9)
    return save(fig, path)


def plot_weights(model: Any, path: Path, title: str) -> Path:
    """The patch weights w_p of a weighted convolutional kernel as a map over patch positions
    ((H − h + 1) × (W − w + 1)), next to their histogram."""
    k = model.kernel
    w = k.weights.detach().cpu().numpy().reshape(k.positions)
    fig, axes = new_figure(1, 2, (8.0, 3.6))
    if w.min() < 0.0 < w.max():  # signs differ: a diverging scale centred on 0
        bound = float(np.abs(w).max())
        im = axes[0, 0].imshow(w, cmap="RdBu_r", vmin=-bound, vmax=bound, interpolation="nearest")
    else:
        im = axes[0, 0].imshow(w, cmap="viridis", interpolation="nearest")
    fig.colorbar(im, ax=axes[0, 0], shrink=0.85)
    axes[0, 0].set_title(f"weights over the {w.shape[0]}×{w.shape[1]} patch positions", fontsize=9)
    axes[0, 1].hist(w.ravel(), bins=40, color="C0")
    axes[0, 1].set_xlabel("weight")
    axes[0, 1].locator_params(axis="x", nbins=5)
    axes[0, 1].set_title("histogram", fontsize=9)
    fig.suptitle(title, fontsize=10)
    return save(fig, path)


def plot_traces(records: Sequence[tuple[str, dict[str, Any]]], path: Path, title: str) -> Path:
    """ELBO per training image (fixed-subset estimate), test error and NLPP (fixed test subset)
    against training seconds, one line per kernel."""
    fig, axes = new_figure(1, 3, (13.0, 3.8))
    for name, rec in records:
        trace = rec.get("trace") or []
        if not trace:
            continue
        t = [p["seconds"] for p in trace]
        for ax, key, scale in zip(axes[0], ("elbo", "error", "nlpp"), (1.0, 100.0, 1.0)):
            ax.plot(t, [scale * p[key] for p in trace], "o-", ms=3, label=name)
    for ax, label in zip(axes[0], ("ELBO / N (subset estimate)", "test error % (subset)",
                                   "test NLPP (subset)")):
        ax.set_xlabel("training seconds")
        ax.set_title(label, fontsize=10)
    axes[0, 1].set_yscale("symlog", linthresh=1.0)  # 0 to 1% linear, then logarithmic
    axes[0, 1].set_yticks([0, 0.5, 1, 2, 5, 10, 20, 50], ["0", "0.5", "1", "2", "5", "10", "20", "50"])
    axes[0, 1].minorticks_off()
    axes[0, 0].legend(fontsize=8)
    fig.suptitle(title)
    return save(fig, path)
