"""Seeded synthetic regression data sets: GP draws in five dimensions (Bui, Yan & Turner 2017,
§4.1), read by `bui2017` and `approximations`.

Data set i has 1000 inputs x ~ N(0, I₅), targets
y = f(x) + ε with f a draw from a zero-mean GP with an SE-ARD kernel (signal variance 1,
lengthscales ℓ_d drawn log-uniformly from [1, 3] per data set and dimension) and
ε ~ N(0, 0.05); a seeded random half of the points is for training, the rest for testing.
Everything is drawn from `numpy.random.default_rng([2017, i])`, so data set i is the same
in every run and every process.
"""

from __future__ import annotations

import numpy as np

from .data import Problem, standardise

SYNTHETIC_DIM = 5
SYNTHETIC_LENGTHSCALES = (1.0, 3.0)  # log-uniform range, per data set and dimension
SYNTHETIC_SIGNAL_VARIANCE = 1.0
SYNTHETIC_NOISE_VARIANCE = 0.05



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
