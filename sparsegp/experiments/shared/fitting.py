"""Quiet fitting and the squared-exponential kernels of the experiments."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, cast

from ...kernels import SquaredExponential
from ...linalg import JitterWarning
from ...validation import ArrayLike

if TYPE_CHECKING:
    from ...models import Model
    from ...training import FitResult


def quiet_fit(model: Model, maxiter: int, tol: float | None = None) -> FitResult:
    """`model.fit` without progress bars or the checks the experiments report themselves."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", JitterWarning)
        return model.fit(maxiter=maxiter, tol=tol, progress=False, diagnose=False)


#: The experiments model y as their protocols give it (the papers' raw Snelson targets, or targets
#: the data modules standardise with the training statistics), as when their results were
#: computed: not standardised again inside the models (the models' default since then).
AS_GIVEN: dict[str, Any] = {"standardize_y": False}


def se_kernel(lengthscale: ArrayLike | None = None, variance: ArrayLike | None = None,
              ard: bool = False) -> SquaredExponential:
    return SquaredExponential(lengthscale=lengthscale, variance=variance, ard=ard)


def se_of(model: Model) -> SquaredExponential:
    """A model's kernel, a squared exponential in these experiments (`se_kernel`)."""
    return cast(SquaredExponential, model.kernel)


def copy_kernel(model: Model) -> SquaredExponential:
    """A fresh SE kernel with the (internal-unit) hyperparameters of a model's SE kernel."""
    k = model.kernel
    return SquaredExponential(lengthscale=k.value("lengthscale").detach().clone(),
                              variance=k.value("variance").detach().clone())
