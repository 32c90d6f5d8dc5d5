"""Test metrics of Gaussian predictions, on the library's Gaussian log density (Rasmussen &
Williams 2006, §2.5, p. 23): the negative log predictive density, and the standardised mean
squared error and log loss, both invariant to shifting and scaling the targets (the same on
standardised or original targets). Lower is better for all."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import torch

from ...likelihoods.gaussian import gaussian_log_density
from ...validation import ArrayLike

if TYPE_CHECKING:
    from ...models import Model


def gaussian_nll(y: ArrayLike, mean: ArrayLike, var: ArrayLike) -> np.ndarray:
    """−log N(y | mean, var) per point, as numpy (the library's Gaussian log density, negated).
    Shapes: y [N*], mean and var [N*] or scalars."""
    values = (torch.as_tensor(np.asarray(a, dtype=np.float64)) for a in (y, mean, var))
    return np.asarray(-gaussian_log_density(*values).numpy())


def predictive_scores(model: Model, Xs: np.ndarray, ys: np.ndarray) -> tuple[float, float, float]:
    """(NLPD, SMSE, RMSE) of noisy test targets: mean −log N(y*|μ*, σ*² + σ²), MSE / var(y*)."""
    mean, var = model.predict(Xs, include_noise=True)  # var ≥ σ² > 0
    mse = float(np.mean((ys - mean) ** 2))
    return mnll(ys, mean, var), smse(ys, mean), math.sqrt(mse)


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
