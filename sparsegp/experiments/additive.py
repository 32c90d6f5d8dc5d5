"""`sparsegp experiment additive`: an additive GP on a real tabular set — a sum of one-column
kernels (`active_dims`) against one ARD kernel over every column, at the same M.

Data: a UCI regression set (default concrete, the 20 standard splits; DATA_DIR/uci/<name>,
docs/data.md; inputs and targets standardised by the training split's moments, so RMSE is in
standard deviations of y). Both models are SGPR (VFE) with M inducing points over all the
columns, fitted by the default `fit()`; the additive kernel is Σ_d SE_d(x_d), each with its
own variance and lengthscale. The table gives test RMSE and NLPD per split and their means;
the figure shows, for split 0, each component's posterior mean f_d(x_d) against its column
(the decomposition an additive model offers: how each input moves the prediction), with the
components' shares of the fitted signal variance. `--quick`: 3 splits, small M, few
iterations.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from ..kernels import Active, Kernel, SquaredExponential
from ..models import SGPR
from ..posteriors import SparsePosterior
from .shared.command import experiment_parser, run_with_data
from .shared.data import missing_uci, uci_problem
from .shared.datafolder import Missing, data_folder, skipped_for_data
from .shared.fitting import quiet_fit
from .shared.metrics import predictive_scores
from .shared.plotting import new_figure, save
from .shared.sections import Section, run_sections
from .shared.tables import Table


@dataclass(frozen=True)
class Config:
    dataset: str = "concrete"
    splits: int = 5
    M: int = 100
    maxiter: int = 1000


FULL = Config()
QUICK = Config(splits=3, M=20, maxiter=60)


def additive_kernel(D: int) -> Kernel:
    """Σ_d SE(x_d): one squared exponential per input column (`active_dims=[d]`)."""
    kernel: Kernel = Active(SquaredExponential(), [0])
    for d in range(1, D):
        kernel = kernel + Active(SquaredExponential(), [d])
    return kernel


def components(model: SGPR, X: np.ndarray) -> np.ndarray:
    """The posterior mean of each additive part at X [N, D] (units of the standardised y):
    f_d(x) = k_d(x, Z) Kuu⁻¹ E[u] = k_d(x, Z) L⁻ᵀ m (whitened q(u) = N(m, ·)). -> [N, D]."""
    post = model.posterior()
    assert isinstance(post, SparsePosterior)
    with torch.no_grad():
        Xt = (torch.as_tensor(X, dtype=torch.float64) - model.x_shift) / model.x_scale
        Z = model.feature.Z
        weights = torch.linalg.solve_triangular(post.L.mT, post.q.mean, upper=True)  # [M, 1]
        parts = [part.K(Xt, Z) @ weights for part in _sum_parts(model)]
        scale = model.y_scale
    return (torch.cat(parts, 1) * scale).numpy()


def fit_pair(X: np.ndarray, y: np.ndarray, cfg: Config) -> tuple[SGPR, SGPR]:
    D = X.shape[1]
    ard = SGPR(X, y, kernel=SquaredExponential(ard=True), inducing_points=cfg.M)
    additive = SGPR(X, y, kernel=additive_kernel(D), inducing_points=cfg.M)
    for model in (ard, additive):
        quiet_fit(model, cfg.maxiter)
    return ard, additive


def plot_components(model: SGPR, X: np.ndarray, names: Sequence[str], out: Path) -> Path:
    f = components(model, X)
    D = X.shape[1]
    cols = 4
    rows = -(-D // cols)
    fig, axes = new_figure(rows, cols, (3.2 * cols, 2.6 * rows))
    shares = np.array([float(p.value("variance").detach()) for p in _parts(model)])
    shares = shares / shares.sum()
    for d in range(rows * cols):
        ax = axes[d // cols][d % cols]
        if d >= D:
            ax.axis("off")
            continue
        order = np.argsort(X[:, d])
        ax.plot(X[order, d], f[order, d], lw=1.5)
        ax.set_title(f"{names[d]}: {100 * shares[d]:.0f}% of the variance", fontsize=9)
        ax.set_xlabel("input (standardised)", fontsize=8)
    axes[0][0].set_ylabel("f_d(x_d) (standardised y)", fontsize=8)
    return save(fig, out / "components.png")


def _sum_parts(model: SGPR) -> list[Any]:
    return list(cast(Any, model.kernel).kernels)


def _parts(model: SGPR) -> list[Any]:
    return [part.kernel for part in _sum_parts(model) if isinstance(part, Active)]


def section(cfg: Config, data_dir: Path, out: Path) -> Section:
    sec = Section("additive", f"An additive GP on {cfg.dataset}",
                  f"SGPR (VFE), M = {cfg.M}, default `fit()` (at most {cfg.maxiter} "
                  "iterations): Σ_d SE(x_d) (one squared exponential per input column, "
                  "`active_dims`) against one SE with ARD lengthscales over every column. "
                  f"{cfg.splits} of the 20 standard splits (UCI data: non-commercial terms of "
                  "the split files); inputs and targets standardised by the training split, "
                  "so RMSE is in standard deviations of y.")
    missing = missing_uci(data_dir, (cfg.dataset,), cfg.splits)
    if missing:
        sec.skipped = skipped_for_data(data_dir, [Path(m) for m in missing])
        return sec
    table = Table("Test RMSE and NLPD per split", ["split", "ARD RMSE", "additive RMSE",
                                                     "ARD NLPD", "additive NLPD"])
    scores = []
    first: tuple[SGPR, np.ndarray] | None = None
    for split in range(cfg.splits):
        problem = uci_problem(data_dir, cfg.dataset, split)
        X, y, Xs, ys = problem.X, problem.y, problem.Xs, problem.ys
        ard, additive = fit_pair(X, y, cfg)
        a, b = predictive_scores(ard, Xs, ys), predictive_scores(additive, Xs, ys)
        scores.append((a[2], b[2], a[0], b[0]))
        table.add(split, a[2], b[2], a[0], b[0])
        if first is None:
            first = (additive, X)
    mean = np.mean(scores, 0)
    table.add("mean", *mean)
    sec.tables.append(table)
    names = [f"x{d}" for d in range(first[1].shape[1])] if first else []
    if first is not None:
        sec.files.append(plot_components(first[0], first[1], names, out))
    better = "lower" if mean[1] < mean[0] else "higher"
    sec.findings.append(f"the additive model's mean test RMSE is {mean[1]:.3f} against "
                        f"{mean[0]:.3f} for the ARD kernel ({better}), NLPD {mean[3]:.3f} "
                        f"against {mean[2]:.3f}")
    return sec


def run(out: Path, quick: bool = False, data_dir: Path | None = None,
        dataset: str | None = None) -> list[Path]:
    cfg = QUICK if quick else FULL
    if dataset is not None:
        cfg = Config(dataset, cfg.splits, cfg.M, cfg.maxiter)
    folder = data_folder(data_dir)
    mode = "quick (3 splits, small M)" if quick else "full"
    return run_sections(Path(out), "Additive GPs on tabular data", mode,
                        [(lambda: section(cfg, folder, Path(out)), 1)], print)


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    p = experiment_parser(parser, "sparsegp experiment additive", __doc__, "additive-results",
                          "3 splits, small M, few iterations", "uci/")
    p.add_argument("--dataset", default="concrete",
                   help="the UCI set under DATA_DIR/uci (default: concrete)")
    return p


def needs(data_dir: Path, dataset: str, splits: int) -> Missing:
    return {dataset: [Path(m) for m in missing_uci(data_dir, (dataset,), splits)]}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    splits = (QUICK if args.quick else FULL).splits
    return run_with_data(parser.prog, args.data_dir,
                         lambda d: needs(d, args.dataset, splits), False,
                         lambda d: run(args.out, quick=args.quick, data_dir=d,
                                       dataset=args.dataset))


if __name__ == "__main__":
    raise SystemExit(main())
