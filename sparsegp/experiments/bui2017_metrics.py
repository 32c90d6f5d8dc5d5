"""Test metrics of `sparsegp experiment bui2017` (Rasmussen & Williams 2006, §2.5, p. 23).

Both are invariant to shifting and scaling the targets, so they are the same whether computed
on standardised or original targets. Lower is better for both.
"""

from __future__ import annotations

import numpy as np

from .common import gaussian_nll


def smse(ys: np.ndarray, mean: np.ndarray) -> float:
    """Standardised mean squared error: mean (y* − μ*)² / var(y*) (the test targets' variance),
    so that predicting the test mean scores 1."""
    return float(np.mean((ys - mean) ** 2) / np.var(ys))


def smll(ys: np.ndarray, mean: np.ndarray, var: np.ndarray, y_train: np.ndarray) -> float:
    """Standardised (mean) log loss: mean over test points of −log p(y*|D, x*) minus the same
    for the trivial model N(mean(y), var(y)) of the training targets; negative is better than
    the trivial model. `var` is the predictive variance of noisy y* (noise included)."""
    trivial = gaussian_nll(ys, float(np.mean(y_train)), float(np.var(y_train)))
    return float(np.mean(gaussian_nll(ys, mean, var) - trivial))


def mnll(ys: np.ndarray, mean: np.ndarray, var: np.ndarray) -> float:
    """Mean negative log predictive density of the test targets (in the standardised units)."""
    return float(np.mean(gaussian_nll(ys, mean, var)))
