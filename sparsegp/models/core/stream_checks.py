"""What a streaming update checks of its new batch before it fits (`streaming.update`): a batch
that does not look like the data the model has seen, and a batch too small to fit the
hyperparameters. The checks after the fit are the family's own (`diagnostics()`).

A streamed model learns its hyperparameters from the new batch and the summary of the old
data. The summary holds what the old data said about f, not about the noise: the noise
variance is judged on the new rows alone. So a batch with fewer rows than the trained
hyperparameters can drive the noise anywhere (one row: towards its floor), and a batch that
has moved (a drift, a new sensor, other units) is absorbed as noise, or as a change of f
where the old data cannot contradict it. Both are warned about, with what to do.

The shift test: under the old model, the new targets' standardised residuals
z_n = (y_n − E[y_n])/sd[y_n] of its predictive distribution (its Gaussian moments) have
E[z_n²] = 1, and Σ z_n² is about χ²_N (exactly so for independent rows; correlated rows
through f only widen its spread). The batch has moved when Σ z_n² is beyond the χ²_N
quantile of probability `SHIFT_P` (a false alarm once in 10⁶ updates of a model that is
right) and the batch sits at least `SHIFT_SD` predictive standard deviations off in root mean
square (a shift that matters, not only one that is detectable on a large batch).
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
from scipy.stats import chi2
from torch import Tensor

from ...diagnostics.report import ApproximationWarning
from ...likelihoods.gaussian import Gaussian
from ...validation import ArrayLike, ScaleWarning
from .model import Model

#: The false-alarm probability of the shift test (per update of a model that is right).
SHIFT_P = 1e-6
#: The least root-mean-square standardised residual of a batch that has moved.
SHIFT_SD = 3.0


def predicts_gaussian_targets(model: Model) -> bool:
    """Whether the model's predictive distribution of y is Gaussian (its moments are the
    test's): a regression model, or a model with a Gaussian likelihood."""
    if model.classifies:
        return False
    likelihood = getattr(model, "likelihood", None)
    return type(likelihood) is Gaussian or (likelihood is None and hasattr(model, "noise_variance"))


def batch_shift(model: Model, X_new: ArrayLike, y_new: ArrayLike) -> str | None:
    """Why the new batch (X_new, y_new [N], in the units of the data) does not look like the
    data `model` has seen (module docstring), or None (also for models whose predictive
    distribution of y is not Gaussian)."""
    if not predicts_gaussian_targets(model):
        return None
    with torch.no_grad():
        mean, var = model.predict_y(X_new)
    mean = np.asarray(mean, dtype=np.float64).reshape(-1)
    sd = np.sqrt(np.asarray(var, dtype=np.float64).reshape(-1))
    y = np.asarray(y_new.detach().cpu() if isinstance(y_new, Tensor) else y_new,
                   dtype=np.float64).reshape(-1)
    z = (y - mean) / sd
    n, total = z.size, float(np.sum(z * z))
    if not (n and np.isfinite(total)):
        return None
    rms = float(np.sqrt(total / n))
    if total <= chi2.isf(SHIFT_P, n) or rms < SHIFT_SD:
        return None
    offset = float(np.mean(y - mean))
    spread = float(np.std(y - mean) / np.mean(sd)) if n > 1 else float("nan")
    where = "above" if offset > 0 else "below"
    return (f"the new batch does not look like the data this model has seen: its {n} targets "
            f"sit {abs(offset):.3g} (units of y) {where} the model's predictions on average, "
            f"{rms:.3g} predictive standard deviations off in root mean square where about 1 "
            f"is expected" + (f" (the residuals' spread is {spread:.3g} of them)"
                              if np.isfinite(spread) else "")
            + ". A streaming update assumes one function and one noise level for every batch: "
            "it would take the change as noise (or as a change of f where the old data cannot "
            "say otherwise). If the data have moved (a drift, a new sensor, other units), fit "
            "a new model to the recent data, or model the change (e.g. with a time input)")


def trained_hyperparameters(model: Model) -> int:
    """The number of trained hyperparameters (kernel, mean, noise or likelihood): trainable
    parameters other than the inducing inputs and the variational distribution."""
    return sum(p.numel() for name, p in model.named_parameters()
               if p.requires_grad and not name.startswith(("feature.", "q_")))


def few_rows(model: Model, rows: int) -> str | None:
    """Why a fit on a new batch of `rows` rows cannot judge the hyperparameters of `model`
    (module docstring), or None."""
    count = trained_hyperparameters(model)
    if rows >= count:
        return None
    return (f"the new batch has {rows} row{'s' if rows != 1 else ''} for {count} trained "
            "hyperparameters: a streamed fit judges them, the noise above all, on the new rows "
            "(the summary of the old data holds f, not the noise), and can drive the noise "
            "anywhere, towards its floor on one row. Update with fit=False to keep the "
            "hyperparameters, freeze the noise before updating (model.freeze(...)), or pass "
            "larger batches")


def warn_about_batch(model: Model, X_new: ArrayLike, y_internal: Tensor, fit: bool,
                     stacklevel: int) -> None:
    """The checks of the module docstring, each as its warning: a batch that has moved
    (`ScaleWarning`), and, when the update fits, too few rows (`ApproximationWarning`)."""
    units = model.units  # the targets as the update checked them, in the units of y
    y_new = y_internal.detach() * units.y_scale.to(y_internal) + units.y_shift.to(y_internal)
    shift = batch_shift(model, X_new, y_new)
    if shift is not None:
        warnings.warn(f"{type(model).__name__}.update: {shift}.", ScaleWarning,
                      stacklevel=stacklevel)
    small = few_rows(model, int(y_internal.shape[0])) if fit else None
    if small is not None:
        warnings.warn(f"{type(model).__name__}.update: {small}.", ApproximationWarning,
                      stacklevel=stacklevel)
