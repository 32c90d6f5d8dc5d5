"""`sparsegp experiment likelihoods`: the non-Gaussian likelihoods against the Gaussian one.

1. Robust regression: a UCI regression set (concrete) with 5% and 10% of the training
   targets replaced by gross errors (± U(5, 10) standard deviations, seeded); SVGP under a
   Gaussian and under a Student-t likelihood, SGPC (Power EP, α = 0.5) under the Student-t,
   scored on the clean test targets; the Gaussian fit to the clean data is the reference.
2. Counts: simulated over-dispersed counts (negative binomial, r = 2 and r = 10); SVGP under a
   negative-binomial and under a Poisson likelihood, held-out log predictive density per count
   and the fitted dispersion. Needs no data: always runs.
3. Ordinal: the red-wine quality ratings as ordered classes; SVGP (and SGPC, α = 0.5) under
   `Ordinal` against a Gaussian SVGP whose predictions are rounded to the nearest class.
Parts whose data are missing from the data folder are skipped with the reason.
`--quick` runs tiny subsets in seconds.
"""

from __future__ import annotations

import argparse
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ... import likelihoods as liks
from ...diagnostics.convergence import ConvergenceWarning
from ...models import SGPC, SVGP
from ..shared.command import experiment_main, experiment_parser
from ..shared.data import uci_folder, uci_problem
from ..shared.datafolder import Missing, data_folder, missing_files, skipped_for_data
from ..shared.fitting import AS_GIVEN, quiet_fit
from ..shared.metrics import gaussian_nll
from ..shared.plotting import new_figure, save
from ..shared.sections import Section, run_sections
from ..shared.tables import Table
from .data import (
    class_scores,
    inject_outliers,
    rounded_class_probabilities,
    simulated_counts,
    split_files,
    wine_ratings,
)

REGRESSION_SET = "concrete"
ORDINAL_SET = "wine-quality-red"


@dataclass(frozen=True)
class Config:
    """Sizes and budgets (`FULL` or `QUICK`)."""

    splits: int = 2
    max_train: int | None = None  # training points kept per split (None: all)
    max_test: int | None = None
    M: int = 40
    maxiter: int = 400  # L-BFGS-B iterations of the Gaussian fits
    steps: int = 300  # full-batch Adam + natural-gradient steps of the non-Gaussian SVGPs
    ep_rounds: int = 8  # SGPC: rounds of site sweeps and hyperparameter steps
    ep_sweeps: int = 2  # site sweeps per round
    fractions: tuple[float, ...] = (0.05, 0.10)
    count_train: int = 400
    count_test: int = 1000
    count_repeats: int = 3
    count_M: int = 20


FULL = Config()
QUICK = Config(splits=1, max_train=120, max_test=60, M=10, maxiter=30, steps=40, ep_rounds=3,
               ep_sweeps=2,
               count_train=150, count_test=300, count_repeats=1, count_M=10)


def _fit(model: SVGP | SGPC, cfg: Config, how: str = "gaussian") -> dict[str, Any]:
    """Fit quietly and return the fit's `info`. `how`: "gaussian" (L-BFGS-B ≤ `cfg.maxiter`
    iterations), "svgp" (a non-Gaussian SVGP: `cfg.steps` full-batch Adam + natural-gradient
    steps) or "ep" (SGPC: ≤ `cfg.ep_rounds` rounds of ≤ `cfg.ep_sweeps` site sweeps)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        if how == "ep":
            result = model.fit(max_sweeps=cfg.ep_sweeps, maxiter=cfg.ep_rounds, progress=False)
        elif how == "svgp":
            result = model.fit(batch_size=model.num_data, epochs=cfg.steps, progress=False)
        else:
            result = quiet_fit(model, cfg.maxiter)
    return dict(getattr(result, "info", None) or {})


def _head(a: np.ndarray, n: int | None) -> np.ndarray:
    return a if n is None else a[:n]


# ---------------------------------------------------------------- 1. robust regression

def robust_section(out: Path, cfg: Config, data_dir: Path) -> Section:
    title = "1. Robust regression: Student-t against Gaussian with outliers"
    sec = Section("robust", title,
                  f"UCI {REGRESSION_SET} (split files for non-commercial use), splits "
                  f"0–{cfg.splits - 1} (targets standardised by "
                  "the clean training statistics); a fraction of the TRAINING targets is "
                  "shifted by ± U(5, 10) standard deviations (random sign, seed = split); "
                  "test RMSE and NLPD on the CLEAN test targets, in standardised units. "
                  f"All models: SE-ARD kernel, M = {cfg.M} inducing points (k-means++, seed 0); "
                  f"Gaussian SVGP by L-BFGS-B ≤ {cfg.maxiter} iterations, Student-t SVGP by "
                  f"{cfg.steps} full-batch Adam + natural-gradient steps; SGPC by Power EP (α = 0.5, "
                  f"≤ {cfg.ep_rounds} rounds of ≤ {cfg.ep_sweeps} site sweeps and hyperparameter "
                  "steps; its skipped site updates are totals per fit). The reference is the "
                  "Gaussian SVGP on the clean training targets.")
    missing = [f for s in range(cfg.splits)
               for f in missing_files(uci_folder(data_dir, REGRESSION_SET), split_files(s))]
    if missing:
        sec.skipped = skipped_for_data(data_dir, missing)
        return sec
    names = ["SVGP Gaussian", "SVGP Student-t", "SGPC Student-t (α = 0.5)"]
    scores: dict[tuple[str, float], list[tuple[float, float]]] = {}
    extras: dict[tuple[str, float], list[float]] = {}
    for split in range(cfg.splits):
        p = uci_problem(data_dir, REGRESSION_SET, split)
        X, y = _head(p.X, cfg.max_train), _head(p.y, cfg.max_train)
        Xs, ys = _head(p.Xs, cfg.max_test), _head(p.ys, cfg.max_test)
        ref = SVGP(X, y, inducing_points=cfg.M, **AS_GIVEN)
        _fit(ref, cfg)
        scores.setdefault(("SVGP Gaussian (clean data)", 0.0), []).append(_gauss_scores(ref, Xs, ys))
        for frac in cfg.fractions:
            dirty, _ = inject_outliers(y, frac, seed=split)
            for name in names:
                if name == "SVGP Gaussian":
                    m: Any = SVGP(X, dirty, inducing_points=cfg.M, **AS_GIVEN)
                    _fit(m, cfg)
                    scores.setdefault((name, frac), []).append(_gauss_scores(m, Xs, ys))
                    continue
                if name == "SVGP Student-t":
                    m = SVGP(X, dirty, likelihood=liks.StudentT(), inducing_points=cfg.M,
                             **AS_GIVEN)
                    info = _fit(m, cfg, "svgp")
                else:
                    m = SGPC(X, dirty, likelihood=liks.StudentT(), inducing_points=cfg.M,
                             alpha=0.5)
                    info = _fit(m, cfg, "ep")
                    extras.setdefault((name, frac), []).append(
                        float(info.get("skipped_updates", 0)))
                mean, _ = m.predict_y(Xs)
                mean = np.asarray(mean).reshape(-1)
                nlpd = -float(np.mean(np.asarray(m.predict_log_density(Xs, ys))))
                scores.setdefault((name, frac), []).append(
                    (float(np.sqrt(np.mean((mean - ys) ** 2))), nlpd))
                extras.setdefault((name + " df", frac), []).append(float(m.likelihood.df))
    table = Table(f"{REGRESSION_SET}: clean-test scores (mean ± sd over {cfg.splits} splits)",
                  ["model", "outliers", "RMSE", "RMSE sd", "NLPD", "NLPD sd", "fitted df",
                   "skipped EP updates"])
    for (name, frac), rows in scores.items():
        a = np.array(rows)
        df = extras.get((name + " df", frac))
        skipped = extras.get((name, frac))
        table.add(name, f"{frac:.0%}", float(a[:, 0].mean()), float(a[:, 0].std()),
                  float(a[:, 1].mean()), float(a[:, 1].std()),
                  float(np.mean(df)) if df else None,
                  float(np.mean(skipped)) if skipped else None)
    sec.tables.append(table)
    sec.files.append(table.write_csv(out / "robust.csv"))
    clean = np.array(scores[("SVGP Gaussian (clean data)", 0.0)]).mean(0)
    for frac in cfg.fractions:
        parts = [f"{n} {np.mean([r[0] for r in scores[(n, frac)]]):.3f} / "
                 f"{np.mean([r[1] for r in scores[(n, frac)]]):.3f}" for n in names]
        sec.findings.append(f"{frac:.0%} outliers, RMSE / NLPD: " + "; ".join(parts)
                            + f" (clean-data Gaussian {clean[0]:.3f} / {clean[1]:.3f})")
    sec.files.append(_robust_figure(out / "robust.png", scores, cfg.fractions, names, clean))
    return sec


def _gauss_scores(model: SVGP, Xs: np.ndarray, ys: np.ndarray) -> tuple[float, float]:
    mean, var = model.predict(Xs, include_noise=True)
    mean, var = np.asarray(mean).reshape(-1), np.asarray(var).reshape(-1)
    return float(np.sqrt(np.mean((mean - ys) ** 2))), float(np.mean(gaussian_nll(ys, mean, var)))


def _robust_figure(path: Path, scores: dict[tuple[str, float], list[tuple[float, float]]],
                   fractions: Sequence[float], names: list[str], clean: np.ndarray) -> Path:
    fig, axes = new_figure(1, 2, (9, 3.4))
    width = 0.8 / len(names)
    for col, metric in enumerate(("test RMSE (clean targets)", "test NLPD (clean targets)")):
        ax = axes[0, col]
        for i, name in enumerate(names):
            values = [np.mean([r[col] for r in scores[(name, f)]]) for f in fractions]
            ax.bar(np.arange(len(fractions)) + i * width, values, width, label=name)
        ax.axhline(clean[col], color="k", ls="--", lw=1, label="Gaussian, clean data")
        ax.set_xticks(np.arange(len(fractions)) + width * (len(names) - 1) / 2)
        ax.set_xticklabels([f"{f:.0%} outliers" for f in fractions])
        ax.set_title(metric, fontsize=9)
    axes[0, 0].legend(fontsize=7)
    return save(fig, path)


# ---------------------------------------------------------------- 2. counts

def counts_section(out: Path, cfg: Config) -> Section:
    title = "2. Counts: negative binomial against Poisson (simulated, over-dispersed)"
    sec = Section("counts", title,
                  "Simulated counts: x uniform on [0, 6]², latent f(x) = 1.5 + sin(x₁) + "
                  "0.5 cos(1.5 x₂), y ~ NegativeBinomial(mean e^f, dispersion r), variance "
                  "μ + μ²/r, with r = 2 (strongly over-dispersed) and r = 10 (mildly); "
                  f"{cfg.count_train} training and {cfg.count_test} test points, "
                  f"{cfg.count_repeats} seeds. SVGP, SE kernel, M = {cfg.count_M}, {cfg.steps} "
                  "full-batch Adam + natural-gradient steps. Score: held-out log predictive "
                  "density per count (mean of log p(y* | data)); higher is better. None of "
                  "the experiments' data sets holds counts: this section is simulated only.")
    table = Table("Held-out log predictive density per count (mean ± sd over seeds)",
                  ["true r", "likelihood", "log density", "sd", "fitted r", "mean RMSE"])
    results: dict[tuple[float, str], list[tuple[float, float, float]]] = {}
    for r in (2.0, 10.0):
        for seed in range(cfg.count_repeats):
            d = simulated_counts(cfg.count_train, cfg.count_test, r, seed)
            for name, lik in (("negative binomial", liks.NegativeBinomial()),
                              ("Poisson", liks.Poisson())):
                m = SVGP(d.X, d.y, likelihood=lik, inducing_points=cfg.count_M)
                _fit(m, cfg, "svgp")
                lpd = float(np.mean(np.asarray(m.predict_log_density(d.Xs, d.ys))))
                mean, _ = m.predict_y(d.Xs)
                rmse = float(np.sqrt(np.mean((np.asarray(mean).reshape(-1) - d.ys) ** 2)))
                fitted = (float(lik.dispersion) if isinstance(lik, liks.NegativeBinomial)
                          else np.nan)
                results.setdefault((r, name), []).append((lpd, fitted, rmse))
    for (r, name), rows in results.items():
        a = np.array(rows)
        table.add(f"{r:g}", name, float(a[:, 0].mean()), float(a[:, 0].std()),
                  float(a[:, 1].mean()) if name == "negative binomial" else None,
                  float(a[:, 2].mean()))
    sec.tables.append(table)
    sec.files.append(table.write_csv(out / "counts.csv"))
    for r in (2.0, 10.0):
        nb = np.array(results[(r, "negative binomial")])
        po = np.array(results[(r, "Poisson")])
        wins = int(np.sum(nb[:, 0] > po[:, 0]))
        sec.findings.append(
            f"r = {r:g}: negative binomial {nb[:, 0].mean():.3f} against Poisson "
            f"{po[:, 0].mean():.3f} nats per count (higher on {wins} of {len(nb)} seeds); "
            f"fitted dispersion {nb[:, 1].mean():.2f} (true {r:g})")
    return sec


# ---------------------------------------------------------------- 3. ordinal

def ordinal_section(out: Path, cfg: Config, data_dir: Path) -> Section:
    title = "3. Ordinal regression: red-wine quality ratings"
    sec = Section("ordinal", title,
                  f"UCI {ORDINAL_SET} (split files for non-commercial use), splits "
                  f"0–{cfg.splits - 1}; ratings mapped to classes "
                  "0..K−1 (rating − lowest rating), inputs standardised. SVGP and SGPC "
                  "(Power EP, α = 0.5) under `Ordinal` (cumulative probit, learned cut points) "
                  "against a Gaussian SVGP on the class index whose predictive mean is rounded "
                  "to the nearest class; its class probabilities are the mass of its "
                  "predictive N(μ, σ² + noise) on [k − ½, k + ½] (the end classes open-ended). "
                  f"SE-ARD kernel, M = {cfg.M}; fits as in section 1; the Ordinal models "
                  "predict the most probable class.")
    missing = [f for s in range(cfg.splits)
               for f in missing_files(uci_folder(data_dir, ORDINAL_SET), split_files(s))]
    if missing:
        sec.skipped = skipped_for_data(data_dir, missing)
        return sec
    rows: dict[str, list[tuple[float, float, float]]] = {}
    skipped: list[float] = []
    K = 0
    for split in range(cfg.splits):
        d = wine_ratings(data_dir, split)
        K = d.num_classes
        X, y = _head(d.X, cfg.max_train), _head(d.y, cfg.max_train)
        Xs, ys = _head(d.Xs, cfg.max_test), _head(d.ys, cfg.max_test)
        g = SVGP(X, y.astype(float), inducing_points=cfg.M)
        _fit(g, cfg)
        mean, var = g.predict(Xs, include_noise=True)
        mean, var = np.asarray(mean).reshape(-1), np.asarray(var).reshape(-1)
        probs = rounded_class_probabilities(mean, var, K)
        rows.setdefault("SVGP Gaussian, rounded", []).append(
            class_scores(probs, ys, np.clip(np.rint(mean), 0, K - 1).astype(int)))
        for name in ("SVGP Ordinal", "SGPC Ordinal (α = 0.5)"):
            if name.startswith("SVGP"):
                m: SVGP | SGPC = SVGP(X, y, likelihood=liks.Ordinal(K), inducing_points=cfg.M)
                _fit(m, cfg, "svgp")
            else:
                m = SGPC(X, y, likelihood=liks.Ordinal(K), inducing_points=cfg.M, alpha=0.5)
                skipped.append(float(_fit(m, cfg, "ep").get("skipped_updates", 0)))
            p, _ = m.predict_y(Xs)
            p = np.asarray(p)
            rows.setdefault(name, []).append(class_scores(p, ys, p.argmax(1)))
    table = Table(f"{ORDINAL_SET}: test scores, K = {K} classes (mean ± sd over {cfg.splits} "
                  "splits)", ["model", "accuracy", "sd", "MAE (classes)", "sd", "NLPD", "sd"])
    for name, values in rows.items():
        a = np.array(values)
        table.add(name, float(a[:, 0].mean()), float(a[:, 0].std()), float(a[:, 1].mean()),
                  float(a[:, 1].std()), float(a[:, 2].mean()), float(a[:, 2].std()))
    sec.tables.append(table)
    sec.files.append(table.write_csv(out / "ordinal.csv"))
    summary = {k: np.array(v).mean(0) for k, v in rows.items()}
    sec.findings.append("accuracy / MAE / NLPD: " + "; ".join(
        f"{k} {v[0]:.3f} / {v[1]:.3f} / {v[2]:.3f}" for k, v in summary.items()))
    sec.findings.append(f"SGPC Ordinal: {np.mean(skipped):.1f} skipped site updates per fit "
                        "(mean over splits)")
    return sec


# ---------------------------------------------------------------- entry points

def missing_data(data_dir: Path, quick: bool = False) -> Missing:
    """The UCI files of sections 1 and 3 missing from `data_dir`."""
    cfg = QUICK if quick else FULL
    return {f"{label} (section {n})": [f for s in range(cfg.splits)
                                       for f in missing_files(uci_folder(data_dir, name),
                                                              split_files(s))]
            for n, label, name in ((1, f"robust regression on {REGRESSION_SET}", REGRESSION_SET),
                                   (3, f"ordinal ratings of {ORDINAL_SET}", ORDINAL_SET))}


def run(out: Path, quick: bool = False, data_dir: Path | None = None,
        log: Callable[[str], None] | None = print) -> list[Path]:
    """Run every section into `out` (results.md, CSV tables, a figure); returns the files.
    `data_dir`: the data folder (None: `shared.datafolder.default_data_dir()`)."""
    cfg = QUICK if quick else FULL
    folder = data_folder(data_dir)
    steps: list[tuple[Callable[[], Section], int]] = [
        (lambda: robust_section(out, cfg, folder), 1),
        (lambda: counts_section(out, cfg), 1),
        (lambda: ordinal_section(out, cfg, folder), 1),
    ]
    return run_sections(out, "Non-Gaussian likelihoods: Student-t, negative binomial, ordinal",
                        "quick" if quick else "full", steps, log)


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    return experiment_parser(parser, "sparsegp experiment likelihoods", __doc__ or "",
                             "results/likelihoods",
                             "tiny subsets and few steps: every part in seconds",
                             "uci/concrete and uci/wine-quality-red")


def main(argv: Sequence[str] | None = None) -> int:
    return experiment_main(build_parser, run, argv, missing_data)


if __name__ == "__main__":
    raise SystemExit(main())
