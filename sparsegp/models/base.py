"""Shared machinery of the Gaussian-likelihood regression models (GPR, SGPR).

A model owns its parameters and data, calls a pure objective from `objectives/`, and builds a
frozen posterior value. The posterior is built once for given parameter values and reused
by every prediction; any change of the parameters (by `fit`, a torch optimiser or a setter)
makes the next prediction build a new one, so it is never stale.
"""

from __future__ import annotations

import math
import numbers
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..config import NOISE_FLOOR
from ..distributed import broadcast_, column_mean_std, global_sum, is_distributed
from ..kernels.base import Kernel, kernel_from_config
from ..kernels.stationary import SquaredExponential
from ..parameters import Parameterised, as_user_value
from ..posteriors import Posterior
from ..training import FitResult, fit_lbfgsb
from ..validation import as_inputs, as_targets, model_device, model_dtype
from .initialisation import signal_variance

MODEL_CLASSES: dict[str, type[GPModel]] = {}


def _check_jitter(jitter: Any) -> float:
    if isinstance(jitter, bool) or not isinstance(jitter, numbers.Real) or not (
        0.0 <= float(jitter) < 1.0
    ):
        raise ValueError(f"jitter must be a number in [0, 1) (relative to the mean diagonal); got {jitter!r}")
    return float(jitter)


class GPModel(Parameterised):
    """A GP regression model with Gaussian noise; see `GPR` and `SGPR`."""

    saves_data_by_default = False
    shards_data = False  # True: X, y are this rank's shard when torch.distributed is running

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        MODEL_CLASSES[cls.__name__] = cls

    def __init__(
        self, X: Any, y: Any, kernel: Kernel | None, noise_variance: Any, *, jitter: float,
        standardize_X: bool, standardize_y: bool, dtype: torch.dtype | None,
    ) -> None:
        super().__init__()
        dtype = model_dtype(X, y, dtype)
        device = model_device(X, y)
        X = as_inputs(X, "X", dtype=dtype, device=device)
        y = as_targets(y, X.shape[0], "y", dtype=dtype, device=device)
        if kernel is None:
            kernel = SquaredExponential(ard=True)
        if not isinstance(kernel, Kernel):
            raise TypeError(f"kernel must be a sparsegp kernel; got {type(kernel).__name__}")
        D = X.shape[1]
        # With data sharded over processes, moments and counts are those of all shards.
        x_mean, x_std = column_mean_std(X) if self.shards_data else _local_mean_std(X)
        y_mean, y_std = column_mean_std(y) if self.shards_data else _local_mean_std(y)
        x_shift = x_mean if standardize_X else X.new_zeros(D)
        x_scale = _nonzero(x_std) if standardize_X else X.new_ones(D)
        y_shift = y_mean if standardize_y else y.new_zeros(())
        y_scale = _nonzero(y_std) if standardize_y else y.new_ones(())
        self._setup(kernel, _check_jitter(jitter), x_shift, x_scale, y_shift, y_scale)
        self._set_data(X, y)
        sv = signal_variance(self.y)
        self.kernel.initialise_from_data(self.X, sv)
        if noise_variance is None:
            noise = sv / 10.0
        else:
            noise = self._noise_to_internal(noise_variance)
        self._add_positive("noise_variance", noise, NOISE_FLOOR)

    def _synchronise(self) -> None:
        """With sharded data, start every rank from rank 0's initial parameters."""
        broadcast_([p.data for p in self.parameters()], "the initial parameters")

    def _setup(self, kernel: Kernel, jitter: float, x_shift: Tensor, x_scale: Tensor,
               y_shift: Tensor, y_scale: Tensor) -> None:
        """Structure shared by construction and `load`: kernel, jitter, unit transforms."""
        self.kernel = kernel.to(dtype=x_shift.dtype, device=x_shift.device)
        self._jitter = jitter
        self.register_buffer("x_shift", x_shift)
        self.register_buffer("x_scale", x_scale)
        self.register_buffer("y_shift", y_shift)
        self.register_buffer("y_scale", y_scale)
        self.register_buffer("X", None, persistent=False)
        self.register_buffer("y", None, persistent=False)
        self._cache: tuple[Posterior, list[Tensor]] | None = None
        self.metadata: dict[str, Any] = {}

    def _set_data(self, X: Tensor, y: Tensor) -> None:
        """Store training data in the model's internal (standardised) units."""
        self.X = (X - self.x_shift) / self.x_scale
        self.y = (y - self.y_shift) / self.y_scale
        self._num_data = int(global_sum(X.shape[0], X)) if self.shards_data else X.shape[0]

    def _noise_to_internal(self, value: Any) -> Any:
        v = torch.as_tensor(value, dtype=self.y_scale.dtype)
        if v.dim() != 0 or not bool(torch.isfinite(v)) or float(v) <= NOISE_FLOOR:
            raise ValueError(f"noise_variance must be a finite number > {NOISE_FLOOR:g}; got {value!r}")
        return float(v) / float(self.y_scale) ** 2

    # -- what users read ------------------------------------------------------------------
    @property
    def noise_variance(self) -> float:
        """Gaussian noise variance σ², in the units of y."""
        return as_user_value(self.value("noise_variance")) * float(self.y_scale) ** 2

    @noise_variance.setter
    def noise_variance(self, v: Any) -> None:
        self.set_value("noise_variance", self._noise_to_internal(v))

    @property
    def jitter(self) -> float:
        return self._jitter

    @property
    def num_data(self) -> int:
        """N: the number of training points (of all shards, when the data are sharded)."""
        return self._num_data

    @property
    def input_dim(self) -> int:
        return self.x_shift.shape[0]

    @property
    def dtype(self) -> torch.dtype:
        return self.x_shift.dtype

    @property
    def device(self) -> torch.device:
        return self.x_shift.device

    # -- objective ------------------------------------------------------------------------
    def _objective(self) -> Tensor:
        """The objective on the internal (standardised) targets."""
        raise NotImplementedError

    def _require_data(self) -> None:
        if self.X is None:
            raise RuntimeError(
                f"this {type(self).__name__} was loaded without its training data: it can "
                "predict with its saved posterior but not evaluate or fit an objective"
            )

    def _log_jacobian(self) -> float:
        # log p(y) = log p(y_std) − N log s_y: report objectives in the units of y.
        return self.num_data * math.log(float(self.y_scale))

    def training_loss(self) -> Tensor:
        """Minus (objective + log prior): the differentiable scalar that `fit()` minimises."""
        self._require_data()
        return -(self._objective() - self._log_jacobian() + self.log_prior())

    def log_marginal_likelihood(self) -> float:
        """The objective being maximised (exact log evidence, bound or PEP energy), as a float."""
        self._require_data()
        with torch.no_grad():
            return float(self._objective()) - self._log_jacobian()

    def fit(self, maxiter: int = 1000, tol: float | None = None, progress: bool | None = None,
            callback: Any = None) -> FitResult:
        """Maximise the objective (+ log priors) with scipy L-BFGS-B; see `training.fit_lbfgsb`."""
        self._require_data()
        return fit_lbfgsb(self, maxiter=maxiter, tol=tol, progress=progress, callback=callback,
                          lockstep=self.shards_data and is_distributed())

    # -- posterior and prediction ---------------------------------------------------------
    def _build_posterior(self) -> Posterior:
        raise NotImplementedError

    def posterior(self) -> Posterior:
        """The frozen posterior at the current parameters (built once, then reused)."""
        params = [p.detach() for p in self.parameters()]
        if self._cache is not None:
            post, snap = self._cache
            if len(snap) == len(params) and all(
                s.shape == p.shape and s.dtype == p.dtype and s.device == p.device
                and torch.equal(s, p) for s, p in zip(snap, params)
            ):
                return post
        self._require_data()
        with torch.no_grad():
            post = self._build_posterior()
        self._cache = (post, [p.clone() for p in params])
        return post

    def _internal_inputs(self, Xnew: Any, name: str = "Xnew") -> Tensor:
        X = as_inputs(Xnew, name, num_features=self.input_dim, dtype=self.dtype, device=self.device)
        return (X - self.x_shift) / self.x_scale

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

    # -- persistence ----------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        """Everything besides tensors that `load` needs to rebuild this model."""
        return {"kernel": self.kernel.config(), "jitter": self._jitter,
                "num_data": self._num_data, "dtype": str(self.dtype).replace("torch.", "")}

    def save(self, path: str | Path, include_data: bool | None = None) -> None:
        """Save the fitted model (format-versioned); see `sparsegp.load`."""
        from .persistence import save_model

        save_model(self, path, include_data)

    @classmethod
    def _restore(cls, config: dict[str, Any], state: dict[str, Tensor]) -> GPModel:
        """An empty model with the saved structure, ready for `load_state_dict(state)`."""
        model = cls.__new__(cls)
        Parameterised.__init__(model)
        model._setup(kernel_from_config(config["kernel"]), _check_jitter(config["jitter"]),
                     state["x_shift"], state["x_scale"], state["y_shift"], state["y_scale"])
        model._num_data = int(config["num_data"])
        model._add_positive("noise_variance", 1.0, NOISE_FLOOR)
        return model

    def _restore_posterior(self, saved: dict[str, Any]) -> Posterior:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(N={self._num_data}, D={self.input_dim})\n{self.summary()}"


def _local_mean_std(T: Tensor) -> tuple[Tensor, Tensor]:
    std = T.std(0) if T.shape[0] > 1 else torch.zeros_like(T[0])
    return T.mean(0), std


def _nonzero(s: Tensor) -> Tensor:
    """Scales with zeros (constant columns) replaced by 1."""
    return torch.where(s > 0, s, torch.ones_like(s))
