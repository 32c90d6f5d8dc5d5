"""The data of `sparsegp experiment bui2017`: seeded synthetic GP draws and the UCI splits,
standardised with their training statistics.

Synthetic (the paper's §4.1): data set i has 1000 inputs x ~ N(0, I₅), targets
y = f(x) + ε with f a draw from a zero-mean GP with an SE-ARD kernel (signal variance 1,
lengthscales ℓ_d drawn log-uniformly from [1, 3] per data set and dimension) and
ε ~ N(0, 0.05); a seeded random half of the points is for training, the rest for testing.
Everything is drawn from `numpy.random.default_rng([2017, i])`, so data set i is the same
in every run and every process.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

SYNTHETIC_DIM = 5
SYNTHETIC_LENGTHSCALES = (1.0, 3.0)  # log-uniform range, per data set and dimension
SYNTHETIC_SIGNAL_VARIANCE = 1.0
SYNTHETIC_NOISE_VARIANCE = 0.05


@dataclass(frozen=True)
class Problem:
    """Standardised training and test data. Shapes: X [N, D], y [N], Xs [N*, D], ys [N*]."""

    X: np.ndarray
    y: np.ndarray
    Xs: np.ndarray
    ys: np.ndarray


def standardise(X: np.ndarray, y: np.ndarray, Xs: np.ndarray, ys: np.ndarray) -> Problem:
    """Shift and scale inputs and targets by the training means and standard deviations
    (a constant training column is only centred: its scale is taken as 1)."""
    mx, sx = X.mean(0), X.std(0)
    sx = np.where(sx > 0, sx, 1.0)
    my, sy = y.mean(), y.std()
    sy = sy if sy > 0 else 1.0
    return Problem((X - mx) / sx, (y - my) / sy, (Xs - mx) / sx, (ys - my) / sy)


def _inputs_and_lengthscales(index: int, points: int) -> tuple[np.ndarray, np.ndarray, np.random.Generator]:
    rng = np.random.default_rng([2017, index])
    X = rng.standard_normal((points, SYNTHETIC_DIM))
    low, high = np.log(SYNTHETIC_LENGTHSCALES)
    ell = np.exp(rng.uniform(low, high, SYNTHETIC_DIM))
    return X, ell, rng


def synthetic_lengthscales(index: int, points: int) -> np.ndarray:
    """The generating lengthscales [5] of synthetic data set `index` (for the report)."""
    return _inputs_and_lengthscales(index, points)[1]


def synthetic_problem(index: int, points: int) -> Problem:
    """Synthetic data set `index` with `points` points (half training, half test)."""
    X, ell, rng = _inputs_and_lengthscales(index, points)
    d = X / ell
    sq = (d * d).sum(1)
    r2 = np.maximum(sq[:, None] + sq[None] - 2 * d @ d.T, 0.0)
    K = SYNTHETIC_SIGNAL_VARIANCE * np.exp(-0.5 * r2)
    f = np.linalg.cholesky(K + 1e-8 * np.eye(points)) @ rng.standard_normal(points)
    y = f + np.sqrt(SYNTHETIC_NOISE_VARIANCE) * rng.standard_normal(points)
    order = rng.permutation(points)
    tr, te = order[: points // 2], order[points // 2:]
    return standardise(X[tr], y[tr], X[te], y[te])


def uci_folder(data_dir: Path, name: str) -> Path:
    return Path(data_dir) / "uci" / name / "data"


@lru_cache(maxsize=4)
def _uci_table(folder: str) -> tuple[np.ndarray, np.ndarray, int]:
    d = Path(folder)
    data = np.loadtxt(d / "data.txt")
    features = np.atleast_1d(np.loadtxt(d / "index_features.txt", dtype=int))
    target = int(np.loadtxt(d / "index_target.txt"))
    return data, features, target


def uci_problem(data_dir: Path, name: str, split: int) -> Problem:
    """UCI data set `name`, split `split` (0-based index files of training and test rows)."""
    folder = uci_folder(data_dir, name)
    data, features, target = _uci_table(str(folder))
    tr = np.loadtxt(folder / f"index_train_{split}.txt", dtype=int)
    te = np.loadtxt(folder / f"index_test_{split}.txt", dtype=int)
    return standardise(data[tr][:, features], data[tr, target], data[te][:, features],
                       data[te, target])


def missing_uci(data_dir: Path, names: tuple[str, ...], splits: int) -> list[str]:
    """The UCI files of the grid that are not in `data_dir` (empty when all are there)."""
    missing = []
    for name in names:
        folder = uci_folder(data_dir, name)
        need = ["data.txt", "index_features.txt", "index_target.txt",
                *(f"index_{part}_{s}.txt" for s in range(splits) for part in ("train", "test"))]
        missing += [str(folder / f) for f in need if not (folder / f).is_file()]
    return missing
