"""Gaussian-likelihood regression models (GPR, SGPR): noise variance and units of y."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..config import NOISE_FLOOR, PARAMETER_DTYPE
from ..diagnostics import Diagnostics, RegressionView, diagnose, warn_if_unhealthy
from ..distributed import is_distributed
from ..means import Zero, as_mean
from ..objectives.collapsed import CollapsedProblem
from ..parameters import as_user_value
from ..training import FitResult
from ..validation import as_targets, target_scale_problems
from .base import Model, nonzero, signal_variance


class GPModel(Model):
    """A GP regression model with Gaussian noise; see `GPR` and `SGPR`.

    With `standardize_y` the model works on (y − mean)/std; predictions, the noise variance
    and the objectives are reported in the units of y.
    """

    def _prepare_targets(self, y: Any, n: int, device: torch.device, parts: dict[str, Any], *,
                         standardize_y: bool = False, **arguments: Any
                         ) -> tuple[Tensor, dict[str, Tensor], dict[str, Any]]:
        y = as_targets(y, n, "y", device=device).to(PARAMETER_DTYPE)
        y_mean, y_std = self._moments(y)
        shift = y_mean if standardize_y else torch.zeros_like(y_mean)
        scale = nonzero(y_std) if standardize_y else torch.ones_like(y_std)
        return (y - shift) / scale, {"y_shift": shift, "y_scale": scale}, {}

    def _target_scale_problems(self, y: Tensor, buffers: dict[str, Tensor], *,
                               standardize_y: bool = False, mean: Any = None, **arguments: Any
                               ) -> list[str]:
        # a prior mean other than zero takes the offset (None and Zero() leave it to the GP)
        zero_mean = isinstance(as_mean(mean), Zero)
        return [] if standardize_y else target_scale_problems(y, zero_mean)

    def _build(self, config: dict[str, Any], parts: dict[str, Any]) -> None:
        super()._build(config, parts)
        self.register_buffer("y_shift", torch.zeros((), dtype=PARAMETER_DTYPE))
        self.register_buffer("y_scale", torch.ones((), dtype=PARAMETER_DTYPE))
        self._add_positive("noise_variance", 1.0, NOISE_FLOOR)

    def _initialise(self, *, noise_variance: Any = None, **arguments: Any) -> None:
        super()._initialise(**arguments)
        with torch.no_grad():
            sv = signal_variance(self.y - self.mean(self.X))
        self.kernel.initialise_from_data(self.X, sv)
        self.set_value("noise_variance",
                       sv / 10.0 if noise_variance is None else self._noise_to_internal(noise_variance))

    def _noise_to_internal(self, value: Any) -> Any:
        try:
            v = torch.as_tensor(value, dtype=PARAMETER_DTYPE)
        except (TypeError, ValueError, RuntimeError):
            v = None
        if v is None or v.dim() != 0 or not bool(torch.isfinite(v)) or float(v) <= NOISE_FLOOR:
            raise ValueError(f"noise_variance must be a finite number > {NOISE_FLOOR:g}; got {value!r}")
        return float(v) / float(self.y_scale) ** 2

    @property
    def noise_variance(self) -> float:
        """Gaussian noise variance σ², in the units of y."""
        return as_user_value(self.value("noise_variance")) * float(self.y_scale) ** 2

    @noise_variance.setter
    def noise_variance(self, v: Any) -> None:
        self.set_value("noise_variance", self._noise_to_internal(v))

    def _objective_offset(self) -> float:
        # log p(y) = log p(y_std) − N log s_y: objectives in the units of y.
        return -self.num_data * math.log(float(self.y_scale))

    def log_marginal_likelihood(self) -> float:
        """The objective being maximised (exact log evidence, bound or PEP energy), as a float."""
        self._require_data()
        with torch.no_grad():
            return float(self._objective()) + self._objective_offset()

    def fit(self, maxiter: int = 1000, tol: float | None = None, progress: bool | None = None,
            callback: Any = None, diagnose: bool = True) -> FitResult:
        """Maximise the objective (+ log priors) with scipy L-BFGS-B; see `training.fit_lbfgsb`.

        Always returns the fitted model's `FitResult` (Ctrl-C stops training at the last
        accepted parameters). With `diagnose` (default) the fitted model is checked by
        `diagnostics()` and one `sparsegp.ApproximationWarning` lists whatever tripped; a check
        that cannot be computed is reported the same way, never raised (not for data sharded
        over torch.distributed ranks, which `diagnostics()` does not support).
        """
        result = super().fit(maxiter=maxiter, tol=tol, progress=progress, callback=callback)
        if diagnose and not result.interrupted and not (self.shards_data and is_distributed()):
            warn_if_unhealthy(self, stacklevel=3)
        return result

    def diagnostic_view(self) -> RegressionView:
        """What the diagnostics read of this model (internal units): see `RegressionView`."""
        self._require_data()
        problem = self.collapsed_problem()
        with torch.no_grad():
            residual = self.y - self.mean(self.X)  # the diagnostics see the zero-mean GP
        if problem is not None:
            problem = problem._replace(y=residual, mean=None)
        return RegressionView(type(self).__name__, self.kernel, self.X, residual,
                              self.value("noise_variance").detach(), self.jitter,
                              self._objective_offset(), self.noise_variance, self.x_shift,
                              self.x_scale, problem,
                              self.shards_data and is_distributed())

    def collapsed_problem(self) -> CollapsedProblem | None:
        """The collapsed objective of a sparse model as a value (None: the exact GP)."""
        return None

    def diagnostics(self, **kwargs: Any) -> Diagnostics:
        """Is the approximation good? Bounds, their gap, noise and inducing-input checks.

        See `sparsegp.diagnostics.diagnose` for the checks and their thresholds (`kwargs`).
        """
        return diagnose(self, **kwargs)

    def predict(self, Xnew: Any, full_cov: bool = False, include_noise: bool = False
                ) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean [N*] and variance [N*] (or covariance [N*, N*]) at Xnew [N*, D].

        Latent f* by default; `include_noise=True` gives the predictive of noisy y*.
        Returned as numpy arrays in the units of y.
        """
        Xs = self._internal_inputs(Xnew)
        post = self.posterior()
        with torch.no_grad():
            mean, var = (post.predict_y if include_noise else post.predict_f)(Xs, full_cov)
        s = self.y_scale
        return self._output(mean * s + self.y_shift, var * s * s)

    def predict_f(self, Xnew: Any, full_cov: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of the latent f* (numpy)."""
        return self.predict(Xnew, full_cov)

    def predict_y(self, Xnew: Any, full_cov: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of noisy observations y* (numpy)."""
        return self.predict(Xnew, full_cov, include_noise=True)
