"""Numbers of the bui2017 report from store rows: differences from the exact GP, pairwise
win rates, average ranks and per-data-set means. Pure functions of lists of row dicts;
only rows with status "ok" count."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import rankdata

from .grid import EXACT

Row = dict[str, Any]
Group = tuple[str, int, int]  # (data set, split, M)


def ok(rows: Sequence[Row]) -> list[Row]:
    return [r for r in rows if r.get("status") == "ok"]


def differences_from_exact(rows: Sequence[Row], metric: str
                           ) -> dict[tuple[str, int], np.ndarray]:
    """{(method, M): metric − the exact GP's metric, one value per data set with both}."""
    exact = {r["dataset"]: r[metric] for r in ok(rows) if r["method"] == EXACT}
    out: dict[tuple[str, int], list[float]] = defaultdict(list)
    for r in ok(rows):
        if r["method"] != EXACT and r["dataset"] in exact:
            out[(r["method"], r["M"])].append(r[metric] - exact[r["dataset"]])
    return {k: np.asarray(v) for k, v in out.items()}


def groups(rows: Sequence[Row]) -> dict[Group, dict[str, Row]]:
    """{(data set, split, M): {method: row}} of the successful runs."""
    out: dict[Group, dict[str, Row]] = defaultdict(dict)
    for r in ok(rows):
        out[(r["dataset"], r["split"], r["M"])][r["method"]] = r
    return dict(out)


@dataclass(frozen=True)
class WinRate:
    """How often `first` had the lower metric than `second` over the comparable groups."""

    first: str
    second: str
    metric: str
    wins: int
    losses: int
    ties: int
    differences: np.ndarray  # first − second, per group

    @property
    def n(self) -> int:
        return self.wins + self.losses + self.ties

    @property
    def rate(self) -> float:
        """Fraction of groups that `first` wins (ties count half); NaN with no groups."""
        return (self.wins + 0.5 * self.ties) / self.n if self.n else float("nan")


def win_rate(grouped: dict[Group, dict[str, Row]], first: str, second: str, metric: str,
             dataset: str | None = None) -> WinRate:
    """`first` against `second` on `metric` (lower wins) over the groups where both ran
    (of one data set when `dataset` is given)."""
    d = np.asarray([g[first][metric] - g[second][metric] for key, g in sorted(grouped.items())
                    if first in g and second in g and (dataset is None or key[0] == dataset)])
    return WinRate(first, second, metric, int((d < 0).sum()), int((d > 0).sum()),
                   int((d == 0).sum()), d)


def win_matrix(grouped: dict[Group, dict[str, Row]], names: Sequence[str], metric: str
               ) -> np.ndarray:
    """[i, j]: the rate at which method i beats method j (NaN on the diagonal)."""
    W = np.full((len(names), len(names)), np.nan)
    for i, a in enumerate(names):
        for j, b in enumerate(names):
            if i != j:
                W[i, j] = win_rate(grouped, a, b, metric).rate
    return W


def mean_ranks(grouped: dict[Group, dict[str, Row]], names: Sequence[str], metric: str,
               Ms: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Mean rank (1 = best, ties averaged) of each method per M, over the groups where every
    method ran; returns (ranks [len(names), len(Ms)], groups counted per M [len(Ms)])."""
    R = np.full((len(names), len(Ms)), np.nan)
    counts = np.zeros(len(Ms), dtype=int)
    for j, M in enumerate(Ms):
        ranks = [rankdata([g[n][metric] for n in names]) for key, g in grouped.items()
                 if key[2] == M and all(n in g for n in names)]
        counts[j] = len(ranks)
        if ranks:
            R[:, j] = np.mean(ranks, axis=0)
    return R, counts


def dataset_means(grouped: dict[Group, dict[str, Row]], dataset: str, names: Sequence[str],
                  metric: str, Ms: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard error over splits of `metric` for each method and M on `dataset`
    (NaN where no split ran). Shapes: [len(names), len(Ms)] each."""
    mean = np.full((len(names), len(Ms)), np.nan)
    se = np.full_like(mean, np.nan)
    for i, n in enumerate(names):
        for j, M in enumerate(Ms):
            v = np.asarray([g[n][metric] for key, g in grouped.items()
                            if key[0] == dataset and key[2] == M and n in g])
            if v.size:
                mean[i, j] = v.mean()
                se[i, j] = v.std(ddof=1) / np.sqrt(v.size) if v.size > 1 else 0.0
    return mean, se
