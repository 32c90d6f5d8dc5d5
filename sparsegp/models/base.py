"""What every model shares: inputs, kernel, jitter, a cached frozen posterior, training.

A model owns its parameters and data, calls a pure objective from `objectives/`, and builds a
frozen posterior value. The posterior is built once for given parameter values and reused
by every prediction; any change of the parameters (by `fit`, a torch optimiser or a setter)
makes the next prediction build a new one, so it is never stale. Subclasses say what the
targets are (`_prepare_targets`), what the objective is (`_objective`) and how the posterior
is built (`_build_posterior`).
"""

from __future__ import annotations

import numbers
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..distributed import broadcast_, column_mean_std, global_sum, is_distributed
from ..kernels.base import Kernel, kernel_from_config
from ..kernels.stationary import SquaredExponential
from ..parameters import Parameterised
from ..posteriors import Posterior
from ..training import FitResult, fit_lbfgsb
from ..validation import as_inputs, model_device, model_dtype

MODEL_CLASSES: dict[str, type[Model]] = {}


def check_jitter(jitter: Any) -> float:
    if isinstance(jitter, bool) or not isinstance(jitter, numbers.Real) or not (
        0.0 <= float(jitter) < 1.0
    ):
        raise ValueError(f"jitter must be a number in [0, 1) (relative to the mean diagonal); got {jitter!r}")
    return float(jitter)


def local_mean_std(T: Tensor) -> tuple[Tensor, Tensor]:
    """Mean and standard deviation (n − 1) over rows; a single row has std 0."""
    std = T.std(0) if T.shape[0] > 1 else torch.zeros_like(T[0])
    return T.mean(0), std


def nonzero(s: Tensor) -> Tensor:
    """Scales with zeros (constant columns) replaced by 1."""
    return torch.where(s > 0, s, torch.ones_like(s))


class Model(Parameterised, ABC):
    """Inputs X [N, D] (optionally standardised), a kernel, targets, a posterior."""

    saves_data_by_default = False
    shards_data = False  # True: X, y are this rank's shard when torch.distributed is running

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        MODEL_CLASSES[cls.__name__] = cls

    def __init__(self, X: Any, y: Any, kernel: Kernel | None, *, jitter: float,
                 standardize_X: bool, dtype: torch.dtype | None) -> None:
        super().__init__()
        dtype = model_dtype(X, y, dtype)
        device = model_device(X, y)
        X = as_inputs(X, "X", dtype=dtype, device=device)
        if kernel is None:
            kernel = SquaredExponential(ard=True)
        if not isinstance(kernel, Kernel):
            raise TypeError(f"kernel must be a sparsegp kernel; got {type(kernel).__name__}")
        # With data sharded over processes, moments and counts are those of all shards.
        x_mean, x_std = self._moments(X)
        D = X.shape[1]
        x_shift = x_mean if standardize_X else X.new_zeros(D)
        x_scale = nonzero(x_std) if standardize_X else X.new_ones(D)
        self._setup(kernel, check_jitter(jitter), x_shift, x_scale)
        self.X = (X - self.x_shift) / self.x_scale
        self.y = self._prepare_targets(y, X.shape[0], dtype, device)
        self._num_data = int(global_sum(X.shape[0], X)) if self.shards_data else X.shape[0]

    def _moments(self, T: Tensor) -> tuple[Tensor, Tensor]:
        return column_mean_std(T) if self.shards_data else local_mean_std(T)

    @abstractmethod
    def _prepare_targets(self, y: Any, n: int, dtype: torch.dtype, device: torch.device) -> Tensor:
        """Validate the targets and return them as the objective uses them (internal units)."""

    def _synchronise(self) -> None:
        """With sharded data, start every rank from rank 0's initial parameters."""
        if self.shards_data:
            broadcast_([p.data for p in self.parameters()], "the initial parameters")

    def _setup(self, kernel: Kernel, jitter: float, x_shift: Tensor, x_scale: Tensor) -> None:
        """Structure shared by construction and `load`: kernel, jitter, input transform."""
        self.kernel = kernel.to(dtype=x_shift.dtype, device=x_shift.device)
        self._jitter = jitter
        self.register_buffer("x_shift", x_shift)
        self.register_buffer("x_scale", x_scale)
        self.register_buffer("X", None, persistent=False)
        self.register_buffer("y", None, persistent=False)
        self._cache: tuple[Posterior, list[Tensor]] | None = None
        self.metadata: dict[str, Any] = {}

    # -- what users read ------------------------------------------------------------------
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

    # -- objective and training -----------------------------------------------------------
    @abstractmethod
    def _objective(self) -> Tensor:
        """The objective being maximised, on the internal (standardised) data."""

    def _require_data(self) -> None:
        if self.X is None:
            raise RuntimeError(
                f"this {type(self).__name__} was loaded without its training data: it can "
                "predict with its saved posterior but not evaluate or fit an objective"
            )

    def _objective_offset(self) -> float:
        """A constant added to `_objective` to report it in the user's units (0 here)."""
        return 0.0

    def training_loss(self) -> Tensor:
        """Minus (objective + log prior): the differentiable scalar that `fit()` minimises."""
        self._require_data()
        return -(self._objective() + self._objective_offset() + self.log_prior())

    def fit(self, maxiter: int = 1000, tol: float | None = None, progress: bool | None = None,
            callback: Any = None) -> FitResult:
        """Maximise the objective (+ log priors) with scipy L-BFGS-B; see `training.fit_lbfgsb`."""
        self._require_data()
        return fit_lbfgsb(self, maxiter=maxiter, tol=tol, progress=progress, callback=callback,
                          lockstep=self.shards_data and is_distributed())

    # -- posterior ------------------------------------------------------------------------
    @abstractmethod
    def _build_posterior(self) -> Posterior:
        """The frozen posterior at the current parameters (see `posterior`)."""

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

    # -- persistence ----------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        """Everything besides tensors that `load` needs to rebuild this model."""
        return {"kernel": self.kernel.config(), "jitter": self._jitter,
                "num_data": self._num_data, "dtype": str(self.dtype).replace("torch.", "")}

    def data_extras(self) -> dict[str, Tensor]:
        """Data-sized state saved along with the data (`save(include_data=True)`)."""
        return {}

    def save(self, path: str | Path, include_data: bool | None = None) -> None:
        """Save the fitted model (format-versioned); see `sparsegp.load`."""
        from .persistence import save_model

        save_model(self, path, include_data)

    @classmethod
    def _restore(cls, config: dict[str, Any], state: dict[str, Tensor]) -> Model:
        """An empty model with the saved structure, ready for `load_state_dict(state)`."""
        model = cls.__new__(cls)
        Parameterised.__init__(model)
        model._setup(kernel_from_config(config["kernel"]), check_jitter(config["jitter"]),
                     state["x_shift"], state["x_scale"])
        model._num_data = int(config["num_data"])
        return model

    @abstractmethod
    def _restore_posterior(self, saved: dict[str, Any]) -> Posterior:
        """The posterior from the tensors `Posterior.state()` saved."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(N={self._num_data}, D={self.input_dim})\n{self.summary()}"
