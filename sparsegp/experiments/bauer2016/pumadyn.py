"""Bauer, van der Wilk & Rasmussen (2016), experiment 6: pumadyn-32nm with M = 40.

DELVE pumadyn-32nm (7168 train / 1024 test, already normalised by the source), SE-ARD kernel.
Exact GP on a 2048-point subset; FITC; VFE; VFE with the hyperparameters frozen while the
inducing inputs are fitted first; VFE initialised from the fitted FITC model.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ...models import GPR, SGPR
from ..shared.data import read_text_files, seeded_rows
from ..shared.datafolder import Missing, missing_files, skipped_for_data
from ..shared.fitting import AS_GIVEN, copy_kernel, quiet_fit, se_kernel
from ..shared.metrics import predictive_scores
from ..shared.plotting import new_figure, save
from ..shared.sections import Section
from ..shared.tables import Table
from .config import Config

FILES = ("pumadyn32nm_train_data.asc.gz", "pumadyn32nm_train_labels.asc.gz",
         "pumadyn32nm_test_data.asc.gz", "pumadyn32nm_test_labels.asc.gz")
HYPERPARAMETERS = ("kernel.lengthscale", "kernel.variance", "noise_variance")


def missing_data(data_dir: Path) -> Missing:
    """The pumadyn-32nm files missing from `data_dir`, under the part's name."""
    return {"pumadyn-32nm (experiment 6)": missing_files(Path(data_dir) / "pumadyn32nm", FILES)}


def load_pumadyn(folder: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(X [7168, 32], y [7168], Xs [1024, 32], ys [1024]) from the DELVE files in `folder`."""
    X, y, Xs, ys = read_text_files(folder, FILES)
    return X, y.reshape(-1), Xs, ys.reshape(-1)


def pumadyn(out: Path, cfg: Config, data_dir: Path) -> Section:
    """Experiment 6; a skipped section (with the reason) when the data files are missing."""
    folder = Path(data_dir) / "pumadyn32nm"
    sec = Section("pumadyn", f"6. pumadyn-32nm, M = {cfg.puma_M}",
                  "DELVE pumadyn-32nm (normalised by the source), SE kernel with one lengthscale "
                  "per input (ARD), every model from the same data-based start (lengthscales "
                  "√D·std, signal variance var(y), noise var(y)/10; k-means++ inducing inputs). "
                  "Objective/N is in nats per training point; the exact GP is fitted on a random "
                  f"{cfg.puma_exact}-point subset (≤ {cfg.puma_exact_maxiter} iterations; its "
                  "objective/N is on that subset). 'Frozen first': the named parameters are held "
                  f"fixed for the first ≤ {cfg.puma_frozen_maxiter} iterations, then everything is "
                  "fitted. 'Initialised from FITC': FITC's kernel and inducing inputs, and its "
                  "noise floored at 1% of var(y).")
    missing = missing_files(folder, FILES)
    if missing:
        sec.skipped = skipped_for_data(Path(data_dir), missing)
        return sec
    X, y, Xs, ys = load_pumadyn(folder)
    rng = np.random.default_rng(0)
    keep = seeded_rows(X.shape[0], cfg.puma_train, rng)
    X, y = X[keep], y[keep]
    if cfg.puma_test is not None and cfg.puma_test < Xs.shape[0]:
        Xs, ys = Xs[: cfg.puma_test], ys[: cfg.puma_test]
    sec.description += f" Training points: {X.shape[0]}, test points: {Xs.shape[0]}."
    table = Table("Results", ["method", "N", "objective / N", "noise variance", "test RMSE",
                              "test NLPD", "lengthscales < 10", "seconds"])
    lengthscales: dict[str, np.ndarray] = {}

    def record(name: str, model, seconds: float) -> None:
        _, _, rmse = scores = predictive_scores(model, Xs, ys)
        ell = np.asarray(model.kernel.lengthscale)
        lengthscales[name] = ell
        table.add(name, model.num_data, model.log_marginal_likelihood() / model.num_data,
                  model.noise_variance, rmse, scores[0], int(np.sum(ell < 10.0)), seconds)

    sub = rng.choice(X.shape[0], min(cfg.puma_exact, X.shape[0]), replace=False)
    start = time.perf_counter()
    exact = GPR(X[sub], y[sub], kernel=se_kernel(ard=True), **AS_GIVEN)
    quiet_fit(exact, cfg.puma_exact_maxiter)
    record(f"exact GP ({len(sub)}-point subset)", exact, time.perf_counter() - start)

    def sparse(approx: str, **kwargs) -> SGPR:
        kwargs.setdefault("kernel", se_kernel(ard=True))
        kwargs.setdefault("inducing_points", cfg.puma_M)
        return SGPR(X, y, approximation=approx, **AS_GIVEN, **kwargs)

    start = time.perf_counter()
    fitc = sparse("fitc")
    quiet_fit(fitc, cfg.maxiter)
    record("FITC", fitc, time.perf_counter() - start)
    start = time.perf_counter()
    vfe = sparse("vfe")
    quiet_fit(vfe, cfg.maxiter)
    record("VFE", vfe, time.perf_counter() - start)
    for label, first in (("VFE, hyperparameters frozen first", HYPERPARAMETERS),
                         ("VFE, noise frozen first", ("noise_variance",))):
        start = time.perf_counter()
        frozen = sparse("vfe")
        frozen.freeze(*first)
        quiet_fit(frozen, cfg.puma_frozen_maxiter)
        frozen.unfreeze(*first)
        quiet_fit(frozen, cfg.maxiter)
        record(label, frozen, time.perf_counter() - start)
    start = time.perf_counter()
    # FITC's noise often collapses to its floor, where the softplus gradient vanishes and VFE's
    # trace term Σd/(2σ²) explodes: start VFE's noise at no less than 1% of var(y).
    from_fitc = sparse("vfe", kernel=copy_kernel(fitc), inducing_points=fitc.inducing_points,
                       noise_variance=max(fitc.noise_variance, 0.01 * float(np.var(y))))
    quiet_fit(from_fitc, cfg.maxiter)
    record("VFE initialised from FITC", from_fitc, time.perf_counter() - start)

    fig, axes = new_figure(1, 2, (12, 4))
    ax = axes[0, 0]
    for name, ell in lengthscales.items():
        ax.plot(np.arange(1, ell.size + 1), ell, marker="o", lw=0.8, ms=3, alpha=0.8, label=name)
    ax.set_yscale("log")
    ax.set_xlabel("input dimension")
    ax.set_title("learned lengthscales", fontsize=9)
    ax.legend(fontsize=7)
    names = table.column("method")
    ax = axes[0, 1]
    ax.barh(np.arange(len(names)), table.column("test RMSE"), color=[f"C{i}" for i in range(len(names))])
    ax.set_yticks(np.arange(len(names)), names, fontsize=7)
    ax.set_xlabel("test RMSE")
    ax.axvline(1.0, color="0.5", ls=":", lw=1)
    fig.suptitle(f"pumadyn-32nm: N = {X.shape[0]}, M = {cfg.puma_M}")
    sec.files.append(save(fig, out / "pumadyn.png"))
    sec.files.append(table.write_csv(out / "pumadyn.csv"))
    sec.tables.append(table)
    rmse = dict(zip(names, table.column("test RMSE")))
    obj = dict(zip(names, table.column("objective / N")))
    noise = dict(zip(names, table.column("noise variance")))
    best = min(rmse, key=lambda name: rmse[name])
    sec.findings += [
        f"Test RMSE: {', '.join(f'{k} {v:.3f}' for k, v in rmse.items())}; best: {best}.",
        f"VFE from the default start reaches objective/N {obj['VFE']:.3f} with noise "
        f"{noise['VFE']:.3f} (var(y) = {float(np.var(y)):.3f}); with all hyperparameters frozen "
        f"first {obj['VFE, hyperparameters frozen first']:.3f}; with the noise frozen first "
        f"{obj['VFE, noise frozen first']:.3f}; initialised from FITC "
        f"{obj['VFE initialised from FITC']:.3f}. Higher is better: every VFE value is a lower "
        "bound on log p(y), so the VFE runs can be compared, unlike FITC's value.",
        f"FITC's noise variance: {noise['FITC']:.2g} (exact GP: "
        f"{noise[names[0]]:.3g}).",
    ]
    return sec
