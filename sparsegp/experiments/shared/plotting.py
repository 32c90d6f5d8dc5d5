"""Figures without pyplot's global state (Agg canvas), shared by the demo and experiments."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ...runtime.files import atomic_file


def new_figure(rows: int, cols: int, size: tuple[float, float], **kwargs: Any
               ) -> tuple[Figure, np.ndarray]:
    """A figure with an Agg canvas and a 2-D array of axes."""
    fig = Figure(figsize=size, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False, **kwargs)
    return fig, axes


def plot_regression_1d(
    ax: Axes, X: np.ndarray, y: np.ndarray, Xs: np.ndarray, mean: np.ndarray, var: np.ndarray,
    Z: np.ndarray | None = None, title: str = "",
) -> None:
    """Data, predictive mean ± 2σ and the inducing inputs (ticks at the bottom) in 1-D."""
    x, sd = Xs[:, 0], np.sqrt(np.maximum(var, 0.0))
    ax.plot(X[:, 0], y, ".", color="0.55", ms=3, label="data")
    ax.plot(x, mean, color="C0", lw=1.5, label="mean")
    ax.fill_between(x, mean - 2 * sd, mean + 2 * sd, color="C0", alpha=0.2, label="±2σ")
    if Z is not None:
        bottom = np.min(mean - 2 * sd)
        ax.plot(Z[:, 0], np.full(Z.shape[0], bottom), "|", color="C3", ms=12, mew=2,
                label=f"Z (M={Z.shape[0]})")
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("x")


def save(fig: Figure, path: str | Path) -> Path:
    """Write the figure to `path` (its format from the suffix), whole or not at all."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path, "wb", what="figure") as f:
        fig.savefig(f, format=path.suffix[1:] or None, dpi=120)
    return path
