"""Gaussian-likelihood regression models (GPR, SGPR): noise variance and units of y."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from ..config import NOISE_FLOOR
from ..distributed import is_distributed
from ..kernels.base import Kernel
from ..parameters import as_user_value
from ..training import FitResult
from ..validation import as_targets
from .base import Model, nonzero
from .initialisation import signal_variance

if TYPE_CHECKING:
    from ..diagnostics import Diagnostics


class GPModel(Model):
    """A GP regression model with Gaussian noise; see `GPR` and `SGPR`.

    With `standardize_y` the model works on (y − mean)/std; predictions, the noise variance
    and the objectives are reported in the units of y.
    """

    def __init__(
        self, X: Any, y: Any, kernel: Kernel | None, noise_variance: Any, *, jitter: float,
        standardize_X: bool, standardize_y: bool, dtype: torch.dtype | None,
    ) -> None:
        self._standardize_y = standardize_y
        super().__init__(X, y, kernel, jitter=jitter, standardize_X=standardize_X, dtype=dtype)
        sv = signal_variance(self.y)
        self.kernel.initialise_from_data(self.X, sv)
        noise = sv / 10.0 if noise_variance is None else self._noise_to_internal(noise_variance)
        self._add_positive("noise_variance", noise, NOISE_FLOOR)

    def _prepare_targets(self, y: Any, n: int, dtype: torch.dtype, device: torch.device) -> Tensor:
        y = as_targets(y, n, "y", dtype=dtype, device=device)
        y_mean, y_std = self._moments(y)
        shift = y_mean if self._standardize_y else y.new_zeros(())
        scale = nonzero(y_std) if self._standardize_y else y.new_ones(())
        self._setup_targets(shift, scale)
        return (y - self.y_shift) / self.y_scale

    def _setup_targets(self, y_shift: Tensor, y_scale: Tensor) -> None:
        self.register_buffer("y_shift", y_shift)
        self.register_buffer("y_scale", y_scale)

    def _noise_to_internal(self, value: Any) -> Any:
        v = torch.as_tensor(value, dtype=self.y_scale.dtype)
        if v.dim() != 0 or not bool(torch.isfinite(v)) or float(v) <= NOISE_FLOOR:
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

        With `diagnose` (default) the fitted model is checked by `diagnostics()` and one
        `sparsegp.diagnostics.ApproximationWarning` lists whatever tripped (not for data
        sharded over torch.distributed ranks, which `diagnostics()` does not support).
        """
        result = super().fit(maxiter=maxiter, tol=tol, progress=progress, callback=callback)
        if diagnose and not (self.shards_data and is_distributed()):
            from ..diagnostics import warn_if_unhealthy  # diagnostics imports models

            warn_if_unhealthy(self, stacklevel=3)
        return result

    def diagnostics(self, **kwargs: Any) -> Diagnostics:
        """Is the approximation good? Bounds, their gap, noise and inducing-input checks.

        See `sparsegp.diagnostics.diagnose` for the checks and their thresholds (`kwargs`).
        """
        from ..diagnostics import diagnose

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
        return (mean * s + self.y_shift).cpu().numpy(), (var * s * s).cpu().numpy()

    def predict_f(self, Xnew: Any, full_cov: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of the latent f* (numpy)."""
        return self.predict(Xnew, full_cov)

    def predict_y(self, Xnew: Any, full_cov: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance of noisy observations y* (numpy)."""
        return self.predict(Xnew, full_cov, include_noise=True)

    @classmethod
    def _restore(cls, config: dict[str, Any], state: dict[str, Tensor]) -> GPModel:
        model = super()._restore(config, state)
        model._setup_targets(state["y_shift"], state["y_scale"])
        model._add_positive("noise_variance", 1.0, NOISE_FLOOR)
        return model
