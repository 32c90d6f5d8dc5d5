"""The data of `sparsegp experiment likelihoods`: outliers injected into regression targets,
simulated over-dispersed counts, the red-wine quality ratings as ordinal classes, and the
scores of a Gaussian model read as a distribution over ordered classes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.stats import norm

from ..shared.data import uci_split, uci_table


def split_files(split: int) -> list[str]:
    """The UCI files one split needs (below uci/<name>/data/)."""
    return ["data.txt", "index_features.txt", "index_target.txt", f"index_train_{split}.txt",
            f"index_test_{split}.txt"]


def inject_outliers(y: np.ndarray, fraction: float, seed: int, low: float = 5.0,
                    high: float = 10.0) -> tuple[np.ndarray, np.ndarray]:
    """A copy of y [N] with round(fraction·N) targets (chosen by `seed`) shifted by
    ±U(low, high) standard deviations of y (random sign); returns (targets, chosen indices)."""
    rng = np.random.default_rng(seed)
    n = int(round(fraction * y.shape[0]))
    chosen = rng.choice(y.shape[0], n, replace=False)
    shift = rng.uniform(low, high, n) * rng.choice([-1.0, 1.0], n) * float(np.std(y))
    out = y.copy()
    out[chosen] += shift
    return out, chosen


def count_mean(x: np.ndarray) -> np.ndarray:
    """The mean count exp(f(x)) of the simulated counts, f(x) = 1.5 + sin(x₁) + 0.5 cos(1.5 x₂)
    for x [N, 2] in [0, 6]²."""
    return np.exp(1.5 + np.sin(x[:, 0]) + 0.5 * np.cos(1.5 * x[:, 1]))


@dataclass(frozen=True)
class Counts:
    """Simulated counts: training (X [N, 2], y [N]) and test (Xs, ys)."""

    X: np.ndarray
    y: np.ndarray
    Xs: np.ndarray
    ys: np.ndarray


def simulated_counts(n_train: int, n_test: int, dispersion: float, seed: int) -> Counts:
    """Negative-binomial counts with mean μ = `count_mean(x)` and variance μ + μ²/r
    (r = `dispersion`), inputs uniform on [0, 6]²."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 6.0, (n_train + n_test, 2))
    mu = count_mean(X)
    # NB(r, p) with p = r/(r + μ): mean μ, variance μ + μ²/r
    y = rng.negative_binomial(dispersion, dispersion / (dispersion + mu)).astype(float)
    return Counts(X[:n_train], y[:n_train], X[n_train:], y[n_train:])


@dataclass(frozen=True)
class Ratings:
    """Standardised inputs and class labels 0..K−1: training (X, y), test (Xs, ys)."""

    X: np.ndarray
    y: np.ndarray
    Xs: np.ndarray
    ys: np.ndarray
    num_classes: int
    lowest: int  # the rating of class 0


def wine_ratings(data_dir: Path, split: int, name: str = "wine-quality-red") -> Ratings:
    """The quality ratings (integers) of split `split` as classes 0..K−1 (rating − lowest
    rating of the whole set), inputs standardised by the training statistics."""
    data, features, target = uci_table(data_dir, name)
    tr, te = uci_split(data_dir, name, split)
    ratings = np.rint(data[:, target]).astype(int)
    lowest = int(ratings.min())
    labels = ratings - lowest
    X, Xs = data[tr][:, features], data[te][:, features]
    mx, sx = X.mean(0), X.std(0)
    sx = np.where(sx > 0, sx, 1.0)
    return Ratings((X - mx) / sx, labels[tr], (Xs - mx) / sx, labels[te],
                   int(labels.max()) + 1, lowest)


def rounded_class_probabilities(mean: np.ndarray, var: np.ndarray, num_classes: int
                                ) -> np.ndarray:
    """The probabilities [N, K] a Gaussian N(mean, var) gives to the classes 0..K−1 read as
    the intervals [k − ½, k + ½], the first and last open to −∞ and +∞ (so they sum to 1)."""
    edges = np.arange(num_classes + 1) - 0.5
    edges[0], edges[-1] = -np.inf, np.inf
    cdf = norm.cdf((edges[None, :] - mean[:, None]) / np.sqrt(var)[:, None])
    return np.diff(cdf, axis=1)


def class_scores(probabilities: np.ndarray, labels: np.ndarray, predicted: np.ndarray
                 ) -> tuple[float, float, float]:
    """(accuracy, mean absolute error in classes, NLPD) of predicted classes [N] and class
    probabilities [N, K] against labels [N]."""
    p = probabilities[np.arange(labels.shape[0]), labels]
    nlpd = float(-np.mean(np.log(np.maximum(p, 1e-300))))
    return (float(np.mean(predicted == labels)), float(np.mean(np.abs(predicted - labels))), nlpd)
