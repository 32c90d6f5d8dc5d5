"""Streaming sparse GP regression (Bui, Nguyen & Turner 2017): `update` turns a fitted SGPR
and a new batch of data into a `StreamingSGPR` that has seen both, without the old data.

The old data are carried by a summary of the old model's posterior q_old(a) over its inducing
inputs a and its prior p_old(a) (`objectives.online.Summary`: r pseudo-observations, M_a² numbers);
the new model learns its hyperparameters and inducing inputs b from the new batch and the
summary alone (`objectives.online.streaming_objective`), in O(N_new·M² + M³). It predicts,
fits, saves and loads as an SGPR does, and can be updated again.

Units: the new model keeps the old model's units (its x_shift, x_scale, y_shift, y_scale),
whatever the new batch's moments: the summary is in those internal units.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor

from ..diagnostics import Diagnostics, RegressionView, diagnose
from ..features.inducing_points import InducingPoints
from ..objectives.online import (
    StreamingProblem,
    Summary,
    streaming_objective,
    streaming_posterior_q,
)
from ..objectives.online_bounds import streaming_upper_bound
from ..posteriors import Posterior, SparsePosterior
from ..runtime.config import PARAMETER_DTYPE
from ..training import FitResult
from ..validation import as_inputs, as_targets, check_columns, check_same_rows
from .base import Model
from .fitting import FitOptions
from .sgpr import SGPR
from .streamed import (
    Streamed,
    Summarised,
    assemble,
    check_fit_arguments,
    summary_of,
    summary_sizes,
)
from .streaming_inducing import new_feature
from .streaming_svgp import StreamingSVGP  # noqa: F401  (registers it for SVGP.update, load)

STREAMING_APPROXIMATIONS = ("vfe", "fitc", "pep")


class StreamingSGPR(Summarised, Streamed, SGPR):
    """An SGPR fitted to a new batch of data and a summary of the data before it (made by
    `update`; Bui, Nguyen & Turner 2017). `log_marginal_likelihood()` is the streaming
    objective (for "vfe" a lower bound on the approximate log p(y_new | y_old): the new
    batch's evidence given what the summary keeps of the old data), `X` and `y` are the new
    batch only (internal units), `num_data` its rows and `num_data_seen` every row the chain
    of updates has seen. The summary is saved with the model (`save`), so a loaded model
    predicts, refits (with include_data=True) and updates as before. `fit` runs L-BFGS-B
    without the checks after fitting; `upper_bound()` bounds the evidence the objective
    approximates from above, and `diagnostics()` reports on the new batch and the summary
    together.

    Example:

        >>> import numpy as np, sparsegp as sg
        >>> from sparsegp.models.streaming import update
        >>> X, y = sg.datasets.snelson()
        >>> left, right = np.argsort(X[:, 0])[:100], np.argsort(X[:, 0])[100:]
        >>> m = sg.SGPR(X[left], y[left], inducing_points=10)
        >>> result = m.fit(maxiter=50)
        >>> new = update(m, X[right], y[right], maxiter=50)  # never sees X[left] again
        >>> type(new).__name__, new.num_data, new.num_data_seen, new.num_inducing
        ('StreamingSGPR', 100, 200, 10)
        >>> mean, var = new.predict_y(X[:3])
        >>> mean.shape
        (3,)
    """

    @classmethod
    def from_update(cls, model: SGPR, X_new: Any, y_new: Any, inducing_points: Any = None,
                    fit: bool = True, **fit_options: Any) -> StreamingSGPR:
        """`update(model, X_new, y_new, ...)`: what `SGPR.update` calls, through the model
        registry (`models.classes.MODELS`), so that sgpr.py need not import this module."""
        return update(model, X_new, y_new, inducing_points, fit, **fit_options)




    def streaming_problem(self) -> StreamingProblem:
        """The model's objective as a pure value: the new batch's collapsed problem and the
        summary of the old data."""
        return StreamingProblem(self.collapsed_problem(), self.old_summary())

    def _objective(self) -> Tensor:
        return streaming_objective(self.streaming_problem())

    def _build_posterior(self) -> Posterior:
        L, q, used = streaming_posterior_q(self.streaming_problem())
        return SparsePosterior(self.kernel, self.feature, L, q, self.noise_rows(), used)

    def _fit_lbfgsb(self, options: FitOptions) -> FitResult:
        # L-BFGS-B without the checks after fitting: restarting from starting values taken
        # from one batch would ignore the summary (`diagnostics()` runs the checks on request)
        return Model._fit_lbfgsb(self, dataclasses.replace(options, diagnose=False))

    def upper_bound(self) -> float:
        """An upper bound on the evidence the streamed objective approximates, log N([y; h];
        0, K̂ + Λ̂) − log p_old(h) at the current parameters: the new batch's density given
        the summary of the old data (`objectives.online_bounds`; any approximation's
        objective is below it at these inducing inputs)."""
        with torch.no_grad():
            U = streaming_upper_bound(self.streaming_problem())
        return float(U) + self._objective_offset()

    def diagnostic_view(self) -> RegressionView:
        """What the diagnostics read of this model: the new batch's collapsed problem and the
        summary of the data before it (see `RegressionView`)."""
        view = SGPR.diagnostic_view(self)
        return dataclasses.replace(view, summary=self.old_summary())

    def diagnostics(self, **kwargs: Any) -> Diagnostics:
        """Is the approximation good? The streamed bounds (lower, upper, the exact evidence
        on small problems) and the checks that are defined for the new batch and the summary
        together; the report lists what it does not compute and why (see
        `sparsegp.diagnostics.diagnose`)."""
        return diagnose(self, **kwargs)





def update(model: SGPR, X_new: Any, y_new: Any, inducing_points: Any = None, fit: bool = True,
           **fit_options: Any) -> StreamingSGPR:
    """A `StreamingSGPR` that has seen the data of `model` (through its posterior, not its
    data) and the new batch X_new [N, D], y_new [N] (units of X and y).

    `model`: a fitted SGPR (or StreamingSGPR) with approximation "vfe", "fitc" or "pep", one
    output, one noise variance, inducing points and a zero prior mean; one loaded without its
    data will do, as long as its saved posterior is current. The new model starts from the
    old hyperparameters and keeps the old units (standardisation) and approximation.
    `inducing_points` means what it means at construction, except that an int M (and the
    default, None: as many as `model` has) chooses M inputs by seeded k-means++ from the old
    inducing inputs and X_new together, so that they cover both the old data's summary and
    the new batch; an array [M, D] (units of X) or an `InducingPoints` is taken as given
    (`inducing_points=model.inducing_points` keeps the old ones). With `fit` (default) the
    hyperparameters and inducing inputs are then fitted to the new batch and the summary
    (`fit_options`: those of `SGPR.fit`, e.g. maxiter); `fit=False` returns the model at the
    old hyperparameters. Cost O(N·M² + M³); the old data are never needed.

    Kept inducing inputs and hyperparameters (b = a, `fit=False`) give the batch posterior
    and bound of all the data seen (`log_marginal_likelihood()`s add up to the batch one),
    exactly with jitter=0; the relative jitter on Kuu perturbs this at its own order (the
    new model sees f(Z_a), the old one f(Z_a) plus the jitter).
    """
    summary = _checked_summary(model)
    check_fit_arguments(fit, fit_options)
    X, y = _new_batch(model, X_new, y_new)
    feature = new_feature(model, inducing_points, X, summary.Z)
    new = _assemble(model, X, y, feature, summary)
    if fit:
        new.fit(**fit_options)
    return new


def _checked_summary(model: Any) -> Summary:
    """The summary of the posterior q(a) of `model`, or a clear error."""
    if not isinstance(model, SGPR):
        raise TypeError(f"update takes a fitted SGPR; got {type(model).__name__}")
    if model.approximation not in STREAMING_APPROXIMATIONS or model.blocks is not None:
        raise ValueError("streaming updates take approximation 'vfe', 'fitc' or 'pep' without "
                         f"blocks; this model has {model.approximation!r}"
                         + (" with blocks" if model.blocks is not None else ""))
    if model.num_outputs != 1 or model.mixing_matrix is not None:
        raise ValueError("streaming updates take a model of one output, y [N]")
    if model.heteroscedastic:
        raise ValueError("streaming updates take a model with one noise variance")
    return summary_of(model, "the collapsed posterior of one output (an SGPR's)")


def _new_batch(model: SGPR, X_new: Any, y_new: Any) -> tuple[Tensor, Tensor]:
    """X_new and y_new in the old model's internal units (float64)."""
    check_same_rows(X_new, y_new)
    check_columns(X_new, model.feature_names, "X_new")
    X = as_inputs(X_new, "X_new", num_features=model.input_dim, device=model.device)
    y = as_targets(y_new, X.shape[0], "y_new", device=model.device)
    X = (X.to(PARAMETER_DTYPE) - model.x_shift) / model.x_scale
    y = (y.to(PARAMETER_DTYPE) - model.y_shift) / model.y_scale
    return X, y


def _assemble(model: SGPR, X: Tensor, y: Tensor, feature: InducingPoints,
              summary: Summary) -> StreamingSGPR:
    """The StreamingSGPR at the old model's hyperparameters and units."""
    new = assemble(StreamingSGPR, model, X, y, {"feature": feature}, summary_sizes(summary))
    new.keep_summary(summary)
    with torch.no_grad():
        noise = new._raw("noise_variance")
        noise.copy_(model._raw("noise_variance"))
        noise.requires_grad_(model._raw("noise_variance").requires_grad)
    return new
