"""`sparsegp demo`: exact GP, VFE, FITC and PEP(0.5) on the bundled Snelson data."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np

from .. import datasets
from ..kernels import SquaredExponential
from ..models import GPR, SGPR
from .shared.plotting import new_figure, plot_regression_1d, save

METHODS = (("exact", None, None), ("VFE", "vfe", None), ("FITC", "fitc", None),
           ("PEP α=0.5", "pep", 0.5))


@dataclass
class DemoRow:
    method: str
    objective: float
    upper_bound: float | None
    tight_upper_bound: float | None  # with data inputs added to Z (see `diagnostics()`)
    noise_variance: float
    lengthscale: float
    seconds: float
    warnings: list[str]


def run_demo(out_dir: str | Path = "sparsegp-demo", num_inducing: int = 12,
             maxiter: int = 1000, progress: bool | None = None) -> tuple[list[DemoRow], Path]:
    """Fit the four models from the same start; return the table rows and the figure path."""
    X, y = datasets.snelson()
    Xs = np.linspace(-1.0, 7.0, 400)[:, None]
    fig, axes = new_figure(2, 2, (10, 6.5), sharex=True, sharey=True)
    rows = []
    for ax, (label, approx, alpha) in zip(axes.flat, METHODS):
        kernel = SquaredExponential()
        model: GPR | SGPR
        if approx is None:
            model = GPR(X, y, kernel=kernel)
        else:
            model = SGPR(X, y, kernel=kernel, inducing_points=num_inducing,
                         approximation=approx, alpha=alpha)
        start = time.perf_counter()
        model.fit(maxiter=maxiter, progress=progress, diagnose=False)  # reported below instead
        seconds = time.perf_counter() - start
        rep = model.diagnostics()
        upper = None if approx is None else rep.upper_bound
        row = DemoRow(label, rep.objective, upper, rep.tight_upper_bound, model.noise_variance,
                      float(cast(SquaredExponential, model.kernel).lengthscale), seconds, rep.warnings)
        rows.append(row)
        mean, var = model.predict(Xs, include_noise=True)
        Z = None if approx is None else cast(SGPR, model).inducing_points
        plot_regression_1d(ax, X, y, Xs, mean, var, Z,
                           f"{label}: objective {row.objective:.2f}, σ² = {row.noise_variance:.3f}")
    axes[0, 0].legend(loc="upper left", fontsize=8)
    fig.suptitle(f"Snelson data (N = {X.shape[0]}), M = {num_inducing} inducing inputs; "
                 "bands are ±2σ of y*")
    return rows, save(fig, Path(out_dir) / "sparsegp_demo.png")


def format_table(rows: list[DemoRow]) -> str:
    """The demo's comparison as a fixed-width text table, then what `diagnostics()` found."""
    head = ("method", "objective", "upper bound", "tight bound", "noise var", "lengthscale",
            "time (s)", "warnings")
    lines = [head]
    for r in rows:
        ub, tb = ("—" if v is None else f"{v:.3f}" for v in (r.upper_bound, r.tight_upper_bound))
        lines.append((r.method, f"{r.objective:.3f}", ub, tb, f"{r.noise_variance:.4f}",
                      f"{r.lengthscale:.4f}", f"{r.seconds:.2f}", str(len(r.warnings))))
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    text = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(line, widths)))
            for line in lines]
    text += ["", "upper bound: Titsias (2014) at the model's inducing inputs; tight bound: with "
             "data inputs added (any set bounds log p(y) from above)."]
    for r in rows:
        text += [f"{r.method}: {w}" for w in r.warnings]
    return "\n".join(text)
