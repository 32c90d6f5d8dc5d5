"""The classification section of the bui2017 report (paper §4.3): pairwise win rates, mean
ranks per M and per-data-set curves of the test error rate and NLL, from the store's rows.
The numbers come from `analysis` and the figures from `plots`, as for the
UCI regression part."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..shared.sections import Section
from ..shared.tables import Table
from .analysis import Row, dataset_means, groups, win_matrix
from .classification import (
    METHODS,
    METRICS,
    NAMES,
    PAIRS,
    TEST_FRACTION,
    ClassificationConfig,
    ClassificationTask,
)
from .plots import plot_dataset_curves, plot_pair_histograms, plot_ranks, plot_win_matrices
from .report import completion, failure_findings, rank_table, win_rate_tables

TITLES = {"error_rate": "test error rate", "nll": "test NLL"}


def _description(cfg: ClassificationConfig, done: int, total: int) -> str:
    f = cfg.fit
    batches = (f"minibatches of {f.batch_size} points" if f.batch_size else
               "one batch of all training points")
    return (
        f"Data sets {list(cfg.datasets)} (DATA_DIR/classification), {cfg.splits} seeded random "
        f"stratified {1 - TEST_FRACTION:.0%}/{TEST_FRACTION:.0%} train/test splits each, inputs "
        f"standardised with training statistics; M ∈ {list(cfg.Ms)} (capped at the number of "
        f"distinct training inputs); SE-ARD kernel, probit likelihood. PEP α and EP (α = 1) are "
        f"SGPC's stochastic Power-EP schedule (paper §3.9): {f.epochs} epochs of {batches}; per "
        f"batch {f.sweeps} damped parallel sweeps of its sites, then an Adam step (lr {f.lr:g}) on "
        f"the energy (its unbiased estimate from the batch) for the kernel hyperparameters and "
        f"inducing inputs, "
        f"without waiting for the sites to converge (they are swept to convergence at the "
        f"end). VFE, the α → 0 limit, is SVGP (Hensman et al. "
        f"2015) with the same batches, epochs and Adam step size, plus natural-gradient "
        f"steps (γ = {f.gamma:g}) on q(u). PEP 0.001 (not in the paper) is SGPC at α = 10⁻³, "
        f"α → 0 by the PEP rows' own schedule: against VFE it measures the optimiser, against "
        f"the other powers the power. Every method starts from the same k-means++ inducing "
        f"inputs and hyperparameters. The error rate counts p(y* = 1) > ½ as class 1; the NLL is "
        f"the mean of −log p(y*|D) over test points (probabilities clipped to [1e-12, 1 − 1e-12]); "
        f"lower is better for both. A comparison counts the (data set, split, M) where both "
        f"methods ran, ties as half; ranks count those where every method ran. Complete: {done} "
        f"of {total} runs.")


def classification_section(cfg: ClassificationConfig, tasks: Sequence[ClassificationTask],
                           rows: Sequence[Row], out: Path) -> Section:
    """Tables (CSV too), figures and findings of the classification part from `rows`."""
    done, total, failed = completion(tasks, rows)
    sec = Section("classification", "3. Binary classification (paper §4.3)",
                  _description(cfg, done, total))
    grouped = groups(rows)
    rates = win_rate_tables(grouped, cfg.datasets, METRICS, TITLES, sec, out / "classification",
                            PAIRS)
    ranks, curves = {}, {}
    for metric in METRICS:
        ranks[metric] = rank_table(grouped, NAMES, metric, cfg.Ms, f"the {TITLES[metric]}", sec,
                                   out / f"classification_ranks_{metric}.csv")
        curves[metric] = {n: dataset_means(grouped, n, NAMES, metric, cfg.Ms) for n in cfg.datasets}
        M = max(cfg.Ms)
        mt = Table(f"Mean {TITLES[metric]} over splits at M = {M}", ["data set", *NAMES])
        for n in cfg.datasets:
            mt.add(n, *[float(v) if np.isfinite(v) else None for v in curves[metric][n][0][:, -1]])
        sec.tables.append(mt)
        sec.files.append(mt.write_csv(out / f"classification_{metric}_M{M}.csv"))
    if grouped:
        sec.files += [
            plot_pair_histograms(rates, out / "classification_pairs.png",
                                 "Classification: differences between pairs over (data set, "
                                 "split, M)"),
            plot_win_matrices({m: win_matrix(grouped, NAMES, m) for m in METRICS}, NAMES,
                              out / "classification_win_matrix.png",
                              "Classification: pairwise win rates"),
            plot_ranks(ranks, METHODS, cfg.Ms, out / "classification_ranks.png",
                       "Classification: mean rank over data sets and splits"),
        ]
        sec.files += [plot_dataset_curves(
            curves[m], METHODS, cfg.Ms, m, out / f"classification_{m}_per_dataset.png",
            f"Classification: {TITLES[m]} per data set (mean ± s.e. over splits)")
            for m in METRICS]
    sec.findings += [f"{TITLES[r.metric]}: {r.first} beats {r.second} in {r.wins} of {r.n} "
                     f"comparisons ({r.rate:.2f})" for r in rates if r.n]
    sec.findings += failure_findings(failed)
    return sec
