"""The report of `sparsegp experiment bui2017`: results.md, CSV tables and figures, made from
whatever rows the store holds (a partial grid gives a partial report that says so)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ...runtime.files import write_atomically
from ..shared.sections import Section
from ..shared.synthetic import (
    SYNTHETIC_DIM,
    SYNTHETIC_LENGTHSCALES,
    SYNTHETIC_NOISE_VARIANCE,
    SYNTHETIC_SIGNAL_VARIANCE,
)
from ..shared.tables import Table
from .analysis import (
    Group,
    Row,
    WinRate,
    dataset_means,
    differences_from_exact,
    groups,
    mean_ranks,
    win_matrix,
    win_rate,
)
from .grid import METHODS, PAIRS, Config
from .plots import plot_dataset_curves, plot_pair_histograms, plot_ranks, plot_synthetic, plot_win_matrices
from .runs import Task

METRICS = ("smse", "smll")
NAMES = [m.name for m in METHODS]
METRIC_TEXT = (
    "SMSE is the test mean squared error divided by the variance of the test targets; SMLL "
    "is the mean over test points of −log p(y*|D) minus the same for a Gaussian with the "
    "training targets' mean and variance (Rasmussen & Williams 2006, p. 23), so negative is "
    "better than that trivial model; lower is better for both.")


def completion(tasks: Sequence[Task], rows: Sequence[Row]) -> tuple[int, int, list[Row]]:
    """(runs of the grid that succeeded, total runs of the grid, failed rows of the grid)."""
    keys = {t.key for t in tasks}
    mine = [r for r in rows if (r["part"], r["dataset"], r["split"], r["M"], r["method"]) in keys]
    return (sum(r["status"] == "ok" for r in mine), len(tasks),
            [r for r in mine if r["status"] != "ok"])


def failure_findings(failed: Sequence[Row]) -> list[str]:
    if not failed:
        return []
    lines = [f"{len(failed)} run(s) failed (recorded, not retried unless --retry-failed); first:"]
    lines += [f"{r['dataset']} split {r['split']} M={r['M']} {r['method']}: {r['error']}"
              for r in failed[:5]]
    return lines


def synthetic_section(cfg: Config, tasks: Sequence[Task], rows: Sequence[Row], out: Path
                      ) -> Section:
    done, total, failed = completion(tasks, rows)
    lo, hi = SYNTHETIC_LENGTHSCALES
    sec = Section("synthetic", "1. Synthetic data (paper §4.1, Fig. 3)", (
        f"{cfg.synthetic_sets} data sets of {cfg.synthetic_points} points in {SYNTHETIC_DIM}-D: x ~ "
        f"N(0, I), y = f(x) + ε, f from a GP with an SE-ARD kernel (signal variance "
        f"{SYNTHETIC_SIGNAL_VARIANCE:g}, lengthscales log-uniform in [{lo:g}, {hi:g}] per data "
        f"set and dimension), ε ~ N(0, {SYNTHETIC_NOISE_VARIANCE:g}); seeded 50:50 train/test "
        f"split; targets and inputs standardised with training statistics. M ∈ "
        f"{list(cfg.synthetic_M)}; every model (and the exact GP) has an SE-ARD kernel whose "
        f"hyperparameters, noise and inducing inputs are fitted by L-BFGS-B for at most "
        f"{cfg.maxiter_synthetic} iterations from the same k-means++ inducing inputs. Numbers are "
        f"means over data sets of the approximation's metric minus the exact GP's. NLML is "
        f"minus the fitted objective (the PEP energy; VFE's bound) in nats, summed over the "
        f"training points. {METRIC_TEXT} Complete: {done} of {total} runs."))
    ok_rows = [r for r in rows if r["status"] == "ok"]
    diffs = {m: differences_from_exact(ok_rows, m) for m in (*METRICS, "nlml")}
    for metric, d in diffs.items():
        t = Table(f"{metric.upper()} − exact GP (mean over data sets)",
                  ["method", *[f"M={M}" for M in cfg.synthetic_M]])
        for m in METHODS:
            vals = [d.get((m.name, M)) for M in cfg.synthetic_M]
            t.add(m.name, *[float(v.mean()) if v is not None and v.size else None for v in vals])
        sec.tables.append(t)
        sec.files.append(t.write_csv(out / f"synthetic_{metric}.csv"))
    if any(d for d in diffs.values()):
        sec.files.append(plot_synthetic(diffs, METHODS, cfg.synthetic_M, out / "synthetic.png",
                                        "Synthetic data: approximation − exact GP (mean ± s.e.)"))
        best_M = max(M for (_, M) in diffs["smll"]) if diffs["smll"] else None
        for M in sorted({k for k in (min(cfg.synthetic_M), best_M) if k is not None}):
            scores = [(float(diffs["smll"][(m.name, M)].mean()), m.name) for m in METHODS
                      if (m.name, M) in diffs["smll"]]
            if scores:
                v, name = min(scores)
                sec.findings.append(f"M = {M}: lowest SMLL − GP is {name} ({v:+.4f}); "
                                    + ", ".join(f"{n} {s:+.4f}" for s, n in scores
                                                if n in ("VFE", "PEP 0.5", "EP")))
        vfe = np.concatenate([v for (n, _), v in diffs["nlml"].items() if n == "VFE"] or [np.zeros(0)])
        if vfe.size:
            sec.findings.append(f"VFE's NLML is above the exact GP's in {int((vfe >= 0).sum())} of "
                                f"{vfe.size} runs (a bound: all, up to the optimiser)")
    sec.findings += failure_findings(failed)
    return sec


def rate_cell(r) -> str:
    """A win rate as a table cell: rate (wins/comparisons), or — without comparisons."""
    return "—" if not r.n else f"{r.rate:.2f} ({r.wins}/{r.n})"


def win_rate_tables(grouped: dict[Group, dict[str, Row]], datasets: Sequence[str],
                    metrics: Sequence[str], titles: dict[str, str], sec: Section, path_stem: Path,
                    pairs: Sequence[tuple[str, str]] = PAIRS) -> list[WinRate]:
    """The pairwise win rates (`pairs` × metrics) over all (data set, split, M) and per data
    set, added to `sec` as tables and CSV files `<stem>_win_rates[_per_dataset].csv`."""
    rates = [win_rate(grouped, a, b, metric) for a, b in pairs for metric in metrics]
    t = Table("Pairwise win rates over (data set, split, M)",
              ["first", "second", "metric", "first better", "second better", "ties", "n",
               "first's win rate"])
    for r in rates:
        t.add(r.first, r.second, titles[r.metric], r.wins, r.losses, r.ties, r.n, r.rate)
    per = Table("Win rate of the first method, per data set (wins / comparisons)",
                ["data set", *[f"{a} vs {b} {titles[m]}" for a, b in pairs for m in metrics]])
    for name in datasets:
        per.add(name, *[rate_cell(win_rate(grouped, a, b, m, dataset=name))
                        for a, b in pairs for m in metrics])
    sec.tables += [t, per]
    sec.files += [t.write_csv(path_stem.with_name(path_stem.name + "_win_rates.csv")),
                  per.write_csv(path_stem.with_name(path_stem.name + "_win_rates_per_dataset.csv"))]
    return rates


def rank_table(grouped: dict[Group, dict[str, Row]], names: Sequence[str], metric: str,
               Ms: Sequence[int], title: str, sec: Section, path: Path) -> np.ndarray:
    """Mean ranks of `names` on `metric` per M (1 = best), added to `sec` as a table and a
    CSV at `path`; returns the [methods, M] array."""
    R, counts = mean_ranks(grouped, names, metric, Ms)
    rt = Table(f"Mean rank on {title} (1 = best of {len(names)}) per M",
               ["method", *[f"M={M} (n={c})" for M, c in zip(Ms, counts)]])
    for i, n in enumerate(names):
        rt.add(n, *[float(v) if np.isfinite(v) else None for v in R[i]])
    sec.tables.append(rt)
    sec.files.append(rt.write_csv(path))
    return R


def regression_section(cfg: Config, tasks: Sequence[Task], rows: Sequence[Row], out: Path
                       ) -> Section:
    done, total, failed = completion(tasks, rows)
    sec = Section("regression", "2. UCI regression (paper §4.2, Figs. 4, 5, 17-22)", (
        f"Data sets {list(cfg.uci_sets)}, {cfg.splits} standard train/test splits each (90/10, "
        f"the PBP/dropout splits), inputs and targets standardised with training statistics; "
        f"M ∈ {list(cfg.uci_M)}; SE-ARD kernel, hyperparameters, noise and inducing inputs fitted "
        f"by L-BFGS-B for at most {cfg.maxiter_uci} iterations from the same k-means++ inducing "
        f"inputs for every α. A comparison counts the (data set, split, M) where both methods "
        f"ran; ranks count those where every method ran. {METRIC_TEXT} Win rates count ties "
        f"as half. Complete: {done} of {total} runs."))
    grouped = groups(rows)
    rates = win_rate_tables(grouped, cfg.uci_sets, METRICS, {m: m.upper() for m in METRICS},
                            sec, out / "regression")
    ranks = {metric: rank_table(grouped, NAMES, metric, cfg.uci_M, metric.upper(), sec,
                                out / f"regression_ranks_{metric}.csv") for metric in METRICS}
    if grouped:
        sec.files += [
            plot_pair_histograms(rates, out / "regression_pairs.png",
                                 "UCI: differences between pairs over (data set, split, M)"),
            plot_win_matrices({m: win_matrix(grouped, NAMES, m) for m in METRICS}, NAMES,
                              out / "regression_win_matrix.png", "UCI: pairwise win rates"),
            plot_ranks(ranks, METHODS, cfg.uci_M, out / "regression_ranks.png",
                       "UCI: mean rank over data sets and splits"),
        ]
        for metric in METRICS:
            curves = {n: dataset_means(grouped, n, NAMES, metric, cfg.uci_M) for n in cfg.uci_sets}
            sec.files.append(plot_dataset_curves(
                curves, METHODS, cfg.uci_M, metric, out / f"regression_{metric}_per_dataset.png",
                f"UCI: {metric.upper()} per data set (mean ± s.e. over splits)"))
    for r in rates:
        if r.n:
            sec.findings.append(f"{r.metric.upper()}: {r.first} beats {r.second} in {r.wins} of "
                                f"{r.n} comparisons ({r.rate:.2f})")
    sec.findings += failure_findings(failed)
    return sec


def write_report(out: Path, cfg: Config, sections: Sequence[Section], header: Sequence[str]
                 ) -> Path:
    """results.md: a header (mode, completion) and every section."""
    lines = ["# Bui, Yan & Turner (2017): Power EP pseudo-point approximations with sparsegp",
             "", *header, ""]
    path = out / "results.md"
    write_atomically(path, "\n".join(lines + [s.markdown() for s in sections]))
    return path


def pending_text(tasks: Sequence[Task], rows: Sequence[Row]) -> str:
    done, total, failed = completion(tasks, rows)
    return (f"{done} of {total} runs of this grid succeeded, {len(failed)} failed, "
            f"{total - done - len(failed)} not run yet")

