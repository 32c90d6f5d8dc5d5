"""`sparsegp experiment approximations`: the approximations a user weighs, side by side.

VFE, FITC and PEP(0.5) (pseudo-points), random Fourier features, the sparse spectrum GP and,
where the inputs have at most three dimensions, KISS-GP — on Snelson, kin40k (a 10k training
subset) and three UCI sets (energy, concrete, kin8nm; the first splits). Equal budgets of K
basis functions: M = K inducing inputs, R = K/2 spectral pairs (2R = K features) and, for
KISS-GP, G = K grid points per dimension. Test RMSE, NLPD (mean ± standard error over the
splits), fitted noise variance and seconds against K. A second section shows SSGP's known
failure (Lázaro-Gredilla et al. 2010) on a 5-D GP draw with N = 200: as R grows relative to N
its training NLPD keeps falling while its test NLPD does not follow, and different
initialisations give diverging predictions.
`--quick` runs reduced sizes in about a minute. Data: DATA_DIR/kin40k and DATA_DIR/uci
(docs/data.md); a data set without its files is skipped, the others run.
"""

from __future__ import annotations

import argparse
import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..datasets import snelson
from ..models import KISSGP, RFF, SGPR, SSGP
from .shared.command import experiment_main, experiment_parser
from .shared.data import KIN40K_FILES, Problem, missing_uci, read_kin40k, standardise, uci_problem
from .shared.datafolder import Missing, data_folder, missing_files, skipped_for_data
from .shared.fitting import AS_GIVEN
from .shared.metrics import predictive_scores
from .shared.plotting import new_figure, save
from .shared.sections import Section, run_sections
from .shared.synthetic import synthetic_problem
from .shared.tables import Table

METHODS = ("VFE", "FITC", "PEP 0.5", "RFF", "SSGP", "KISS-GP")
UCI = ("energy", "concrete", "kin8nm")


@dataclass(frozen=True)
class Config:
    """Sizes and budgets (`FULL` or `QUICK`)."""

    budgets: tuple[int, ...] = (10, 25, 50, 100)
    splits: int = 3  # UCI and Snelson splits (kin40k: one subsample)
    kin40k_train: int = 10_000
    kin40k_test: int = 5_000
    maxiter: int = 200
    ski_steps: int = 200
    overfit_R: tuple[int, ...] = (5, 10, 25, 50, 100, 200)
    overfit_seeds: int = 5


FULL = Config()
QUICK = Config(budgets=(10, 25), splits=1, kin40k_train=1000, kin40k_test=1000, maxiter=40,
               ski_steps=40, overfit_R=(5, 25, 60), overfit_seeds=2)


def fit_method(method: str, K: int, p: Problem, cfg: Config, seed: int = 0) -> dict | None:
    """Fit one method with budget K; its test scores, noise and time (None: not applicable)."""
    X, y = p.X, p.y
    if method == "KISS-GP" and X.shape[1] > 3:
        return None
    start = time.perf_counter()
    model: SGPR | RFF | KISSGP
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if method in ("VFE", "FITC", "PEP 0.5"):
            approx, alpha = {"VFE": ("vfe", None), "FITC": ("fitc", None),
                             "PEP 0.5": ("pep", 0.5)}[method]
            model = SGPR(X, y, inducing_points=min(K, X.shape[0]), approximation=approx,
                         alpha=alpha, seed=seed, **AS_GIVEN)
            model.fit(maxiter=cfg.maxiter, progress=False, diagnose=False)
        elif method in ("RFF", "SSGP"):
            model = (RFF if method == "RFF" else SSGP)(X, y, num_features=max(1, K // 2),
                                                       seed=seed, **AS_GIVEN)
            model.fit(maxiter=cfg.maxiter, progress=False, diagnose=False)
        else:
            model = KISSGP(X, y, grid_size=max(8, K), seed=seed, **AS_GIVEN)
            model.fit(maxiter=cfg.ski_steps, progress=False)
    seconds = time.perf_counter() - start
    nlpd, _, rmse = predictive_scores(model, p.Xs, p.ys)
    noise = float(np.mean(model.noise_variance))
    return {"rmse": rmse, "nlpd": nlpd, "noise": noise, "seconds": seconds}


def _snelson_splits(splits: int) -> list[Problem]:
    X, y = snelson()
    out = []
    for s in range(splits):
        order = np.random.default_rng(s).permutation(X.shape[0])
        tr, te = order[:150], order[150:]
        out.append(standardise(X[tr], y[tr], X[te], y[te]))
    return out


def _kin40k(folder: Path, cfg: Config) -> list[Problem]:
    X, y, Xs, ys = read_kin40k(folder)
    rng = np.random.default_rng(0)
    tr = rng.choice(X.shape[0], min(cfg.kin40k_train, X.shape[0]), replace=False)
    te = rng.choice(Xs.shape[0], min(cfg.kin40k_test, Xs.shape[0]), replace=False)
    return [standardise(X[tr], y[tr].reshape(-1), Xs[te], ys[te].reshape(-1))]


def _mean_se(values: list[float]) -> tuple[float, float]:
    v = np.asarray(values)
    return float(v.mean()), float(v.std(ddof=1) / math.sqrt(len(v))) if len(v) > 1 else 0.0


def dataset_section(out: Path, cfg: Config, name: str, problems: list[Problem]) -> Section:
    """Every method at every budget on the splits of one data set: table, figure, findings."""
    D, N = problems[0].X.shape[1], problems[0].X.shape[0]
    sec = Section(f"approximations-{name}", f"{name} (N = {N}, D = {D})",
                  f"{len(problems)} split(s); L-BFGS-B ≤ {cfg.maxiter} iterations (KISS-GP: "
                  f"{cfg.ski_steps} Adam steps); standardised inputs and targets; NLPD of "
                  "noisy test targets. ± is one standard error over the splits.")
    table = Table(f"{name}: test scores against the budget K",
                  ["method", "K", "RMSE", "± RMSE", "NLPD", "± NLPD", "noise variance",
                   "seconds"])
    curves: dict[str, list[tuple[int, float, float, float, float]]] = {}
    for method in METHODS:
        for K in cfg.budgets:
            runs = [r for p in problems if (r := fit_method(method, K, p, cfg)) is not None]
            if not runs:
                continue
            rmse, rmse_se = _mean_se([r["rmse"] for r in runs])
            nlpd, nlpd_se = _mean_se([r["nlpd"] for r in runs])
            table.add(method, K, rmse, rmse_se, nlpd, nlpd_se,
                      float(np.mean([r["noise"] for r in runs])),
                      float(np.mean([r["seconds"] for r in runs])))
            curves.setdefault(method, []).append((K, rmse, rmse_se, nlpd, nlpd_se))
    sec.tables.append(table)
    sec.files.append(table.write_csv(out / f"{name}.csv"))
    for K in (cfg.budgets[0], cfg.budgets[-1]):
        rows = [r for r in table.rows if r[1] == K]
        best = min(rows, key=lambda r: r[4])
        close = [r[0] for r in rows if r[4] <= best[4] + best[5] + r[5] and r is not best]
        sec.findings.append(f"K = {K}: lowest test NLPD {best[0]} ({best[4]:.3f} ± {best[5]:.3f})"
                            + (f", within the error bars: {', '.join(close)}" if close else ""))
    fig, axes = new_figure(1, 2, (10, 3.6))
    for method, pts in curves.items():
        Ks, rm, rse, n, nse = map(np.array, zip(*pts))
        axes[0, 0].errorbar(Ks, rm, rse, marker="o", ms=3, capsize=2, label=method)
        axes[0, 1].errorbar(Ks, n, nse, marker="o", ms=3, capsize=2, label=method)
    for ax, what in zip(axes[0], ("test RMSE", "test NLPD")):
        ax.set_xscale("log")
        ax.set_xlabel("budget K (inducing inputs = features = grid points per dimension)")
        ax.set_ylabel(what)
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(name, fontsize=10)
    sec.files.append(save(fig, out / f"{name}.png"))
    return sec


def summary_section(out: Path, tables: list[Table]) -> Section:
    """Which approximation when: per (data set, budget) the rank of each method by test NLPD
    and RMSE, and how often each is best (or within one standard error of the best)."""
    sec = Section("which-when", "Which approximation when",
                  "Counted over every (data set, budget K) above: how often each method has "
                  "the lowest test NLPD (and RMSE), how often it is within the error bars of "
                  "the best, and its mean rank by NLPD (1 = best).")
    stats: dict[str, dict[str, Any]] = {m: {"nlpd": 0, "rmse": 0, "close": 0, "ranks": []}
                                        for m in METHODS}
    for table in tables:
        for K in sorted({r[1] for r in table.rows}):
            rows = [r for r in table.rows if r[1] == K]
            by_nlpd = sorted(rows, key=lambda r: r[4])
            best = by_nlpd[0]
            stats[best[0]]["nlpd"] += 1
            stats[min(rows, key=lambda r: r[2])[0]]["rmse"] += 1
            for rank, r in enumerate(by_nlpd, 1):
                stats[r[0]]["ranks"].append(rank)
                if r[4] <= best[4] + best[5] + r[5]:
                    stats[r[0]]["close"] += 1
    table = Table("Wins and ranks", ["method", "cases", "best NLPD", "best RMSE",
                                     "within error bars of the best NLPD", "mean NLPD rank"])
    for m, st in stats.items():
        if st["ranks"]:
            table.add(m, len(st["ranks"]), st["nlpd"], st["rmse"], st["close"],
                      float(np.mean(st["ranks"])))
    sec.tables.append(table)
    sec.files.append(table.write_csv(out / "which_when.csv"))
    if table.rows:
        top = min(table.rows, key=lambda r: r[5])
        sec.findings.append(f"best mean NLPD rank: {top[0]} ({top[5]:.2f} over {top[1]} cases)")
    return sec


def overfitting_section(out: Path, cfg: Config) -> Section:
    """SSGP against RFF on a 5-D GP draw (200 training points) as R grows, several seeds."""
    p = synthetic_problem(0, 400)
    sec = Section("ssgp-overfitting", "SSGP over-fits as R grows (Lázaro-Gredilla et al. 2010)",
                  "A draw from a GP with a 5-D squared exponential kernel (the synthetic data "
                  "of `experiment bui2017`), 200 training and 200 test points; R spectral pairs "
                  "(SSGP: 5R free frequencies), "
                  f"{cfg.overfit_seeds} seeds (initial frequencies) each; training and test "
                  "NLPD of noisy targets, and the spread (standard deviation across seeds) of the "
                  "test predictive means.")
    table = Table("SSGP and RFF against R", ["method", "R", "train NLPD", "test NLPD",
                                             "spread of test means"])
    for cls in (RFF, SSGP):
        for R in cfg.overfit_R:
            train, test, means = [], [], []
            for seed in range(cfg.overfit_seeds):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    model = cls(p.X, p.y, num_features=R, seed=seed)
                    model.fit(maxiter=cfg.maxiter * 2, progress=False, diagnose=False)
                train.append(predictive_scores(model, p.X, p.y)[0])
                test.append(predictive_scores(model, p.Xs, p.ys)[0])
                means.append(model.predict(p.Xs)[0])
            table.add(cls.__name__, R, float(np.mean(train)), float(np.mean(test)),
                      float(np.mean(np.std(means, axis=0))))
    sec.tables.append(table)
    sec.files.append(table.write_csv(out / "ssgp_overfitting.csv"))
    sec.files.append(overfitting_figure(table, out / "ssgp_overfitting.png"))
    ss = [r for r in table.rows if r[0] == "SSGP"]
    sec.findings.append(
        f"SSGP: train NLPD {ss[0][2]:.2f} → {ss[-1][2]:.2f} and test NLPD {ss[0][3]:.2f} → "
        f"{ss[-1][3]:.2f} from R = {ss[0][1]} to {ss[-1][1]}; spread of test means across seeds "
        f"{ss[0][4]:.3f} → {ss[-1][4]:.3f}")
    return sec


def overfitting_figure(table: Table, path: Path) -> Path:
    """Train and test NLPD (symmetric-log scale: SSGP's test NLPD explodes) and the spread of
    the test means across seeds, against R."""
    fig, axes = new_figure(1, 2, (9, 3.4))
    for name in ("RFF", "SSGP"):
        rows = [r for r in table.rows if r[0] == name]
        R = [r[1] for r in rows]
        axes[0, 0].plot(R, [r[2] for r in rows], "o--", label=f"{name} train")
        axes[0, 0].plot(R, [r[3] for r in rows], "o-", label=f"{name} test")
        axes[0, 1].plot(R, [r[4] for r in rows], "o-", label=name)
    axes[0, 0].set_yscale("symlog", linthresh=1.0)
    axes[0, 0].set_ylabel("NLPD")
    axes[0, 1].set_ylabel("std of test means across seeds")
    for ax in axes[0]:
        ax.set_xscale("log")
        ax.set_xlabel("R spectral pairs")
        ax.legend(fontsize=7)
    return save(fig, path)


def missing_data(data_dir: Path, quick: bool = False, cfg: Config | None = None) -> Missing:
    """Per data set read from `data_dir` (kin40k and `UCI`), its files missing there."""
    cfg = cfg or (QUICK if quick else FULL)
    missing: dict[str, list[Path]] = {"kin40k": missing_files(Path(data_dir) / "kin40k",
                                                             KIN40K_FILES)}
    for name in UCI:
        missing[name] = [Path(f) for f in missing_uci(Path(data_dir), (name,), cfg.splits)]
    return missing


def run(out: Path, quick: bool = False, data_dir: Path | None = None,
        log: Callable[[str], None] | None = print, cfg: Config | None = None) -> list[Path]:
    """Run every section into `out` (results.md, CSV tables, figures); returns the files.
    `cfg` overrides the sizes of `quick` (FULL or QUICK); `data_dir`: the data folder (None:
    `shared.datafolder.default_data_dir()`)."""
    cfg = cfg or (QUICK if quick else FULL)
    data_dir = data_folder(data_dir)
    missing = missing_data(data_dir, cfg=cfg)
    tables: list[Table] = []

    def dataset(name: str, problems: Callable[[], list[Problem]]) -> Section:
        sec = dataset_section(out, cfg, name, problems())
        tables.extend(sec.tables)
        return sec

    steps: list[tuple[Callable[[], Section], int]] = [
        (lambda: dataset("snelson", lambda: _snelson_splits(cfg.splits)), 1)]
    kin = data_dir / "kin40k"
    for name in ("kin40k", *UCI):
        if missing[name]:
            def skipped(n: str = name) -> Section:
                return _skipped(n, skipped_for_data(data_dir, missing[n]))

            steps.append((skipped, 1))
        elif name == "kin40k":
            steps.append((lambda: dataset("kin40k", lambda: _kin40k(kin, cfg)), 2))
        else:
            def uci(n: str = name) -> Section:
                return dataset(n, lambda: [uci_problem(data_dir, n, s) for s in range(cfg.splits)])

            steps.append((uci, 2))
    steps.append((lambda: overfitting_section(out, cfg), 1))
    steps.append((lambda: summary_section(out, tables), 1))
    return run_sections(out, "The approximations side by side", "quick" if quick else "full",
                        steps, log)


def _skipped(name: str, reason: str) -> Section:
    sec = Section(f"approximations-{name}", name, f"Reads {name}'s files from the data folder.")
    sec.skipped = reason
    return sec


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """The experiment's options (on `parser`, e.g. a CLI subparser, or a new parser)."""
    return experiment_parser(parser, "sparsegp experiment approximations", __doc__,
                             "approximations-results", "reduced sizes (about a minute)",
                             "kin40k/ and uci/ (optional)")


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (0 when data sets are missing: the
    Snelson and synthetic sections need no data)."""
    return experiment_main(build_parser, run, argv, missing_data)


if __name__ == "__main__":
    raise SystemExit(main())
