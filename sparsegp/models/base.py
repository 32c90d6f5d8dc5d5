"""What every model shares: data, kernel, jitter, one construction path, a cached posterior.

Construction goes one way. `__init__` validates the data and turns the user's arguments into
a plain `config` and the modules (`parts`: kernel, inducing feature, likelihood) through
`_configure`; `load` rebuilds the same parts from a saved config. Both then call `_build`,
the only place where a model's structure (parameters, buffers, options) is declared, and
`__init__` finally gives the parameters their data-based starting values (`_initialise`).

A model owns its parameters and data, calls a pure objective from `objectives/`, and builds a
frozen posterior value. The posterior is cached under a key of *all* the state it depends on
(every parameter and buffer: their values — exact copies, checksums of the data-sized ones —,
version counters, identity, shape, dtype, device; the training data and, e.g., EP sites
included: `StateKey`), so any change — by `fit`, a torch optimiser, a setter, `.data` or a
numpy view, a site update or new data — makes the next prediction build it anew.

Parameters, stored data and factorisations are float64 whatever the data's dtype
(`config.PARAMETER_DTYPE`); `model.dtype` is the dtype of the heavy work and of the outputs.
"""

from __future__ import annotations

import warnings
from abc import abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

import numpy as np
import torch
from torch import Tensor

from ..distributed import (
    POOLED_ROWS,
    broadcast_,
    check_same_on_all_ranks,
    column_mean_std,
    count_rows,
    is_distributed,
    pooled_rows,
)
from ..kernels.active import columns_seen
from ..kernels.base import Kernel
from ..kernels.separate import Separate
from ..kernels.stationary import SquaredExponential
from ..means import Mean, Zero, as_mean
from ..posteriors import Posterior
from ..runtime.config import PARAMETER_DTYPE
from ..runtime.threads import threads_for
from ..training import FitResult, fit_lbfgsb
from ..training.lbfgs import MAXITER
from ..validation import (
    ScaleWarning,
    as_inputs,
    check_columns,
    check_feature_names,
    check_same_rows,
    column_names,
    input_scale_problems,
    model_device,
    model_dtype,
)
from .core import PARTS, ModelCore
from .dtypes import dtype_name
from .fitting import FitOptions, TrainingPlan, default, settle_rule, stall_rule
from .options import ModelOptions
from .predictions import prediction_inputs
from .state import StateKey


def local_mean_std(T: Tensor) -> tuple[Tensor, Tensor]:
    """Mean and standard deviation (n − 1) over rows; a single row has std 0."""
    std = T.std(0) if T.shape[0] > 1 else torch.zeros_like(T[0])
    return T.mean(0), std


def nonzero(s: Tensor) -> Tensor:
    """Scales with zeros (constant columns) replaced by 1."""
    return torch.where(s > 0, s, torch.ones_like(s))


def signal_variance(y: Tensor) -> float:
    """var(y), or 1 for constant targets (a starting value for kernel and noise variances)."""
    v = float(y.var()) if y.shape[0] > 1 else 0.0
    return v if v > 0.0 else 1.0


#: A noise variance that is not given starts at this fraction of the signal variance.
NOISE_FRACTION = 0.1


def _trailing_shape(y: Any) -> str:
    """y's shape after the rows, as '[N]' or '[N, P]'."""
    return "[" + ", ".join(["N", *(str(n) for n in tuple(np.shape(y))[1:])]) + "]"


#: The options type of a model class (`options.ModelOptions` or a subclass).
O = TypeVar("O", bound=ModelOptions)


class Model(ModelCore, Generic[O]):
    """Inputs X [N, D] (optionally standardised), a kernel, targets, a posterior.

    `O`: the model's options (`options.py`), which every construction hook receives."""

    shards_data = False  # True: X, y are this rank's shard when torch.distributed is running
    posterior_needs_data = True  # False: the posterior is built from parameters alone (SVGP)
    separate_kernels = False  # True: takes kernels.Separate, one kernel per output (SGPR, SVGP)

    kernel: Kernel
    mean: Mean
    x_shift: Tensor  # buffers [D]: X is stored as (X − x_shift)/x_scale
    x_scale: Tensor

    def __init__(self, X: Any, y: Any, options: O) -> None:
        super().__init__()
        standardize_X = options.standardize_X
        dtype = model_dtype(X, y, options.dtype)
        device = model_device(X, y)
        check_same_rows(X, y)
        names = column_names(X)  # a DataFrame's columns; inducing inputs given as one must match
        check_columns(getattr(options, "inducing_points", None), names, "inducing_points")
        X = as_inputs(X, "X", dtype=dtype, device=device).to(PARAMETER_DTYPE)
        if self.shards_data:  # before the first collective operation, which would hang
            check_same_on_all_ranks(f"X [N, {X.shape[1]}], y {_trailing_shape(y)}, "
                                    f"dtype {dtype_name(dtype)}", "the data's shape and dtype")
        # With data sharded over processes, moments and counts are those of all shards.
        x_mean, x_std = self._moments(X)
        x_shift = x_mean if standardize_X else torch.zeros_like(x_mean)
        x_scale = nonzero(x_std) if standardize_X else torch.ones_like(x_std)
        X = (X - x_shift) / x_scale
        num_data = count_rows(X, self.shards_data)
        config, parts = self._configure(X, options, x_shift, x_scale)
        # Per-column scale advice does not apply where the kernel fixes what each column means
        # (image pixels shared by every patch position refuse standardize_X).
        fixed = getattr(parts.get("kernel"), "input_dim", None) is not None
        problems = [] if standardize_X or fixed else input_scale_problems(X, names)
        y, target_buffers, target_config = self._prepare_targets(y, X.shape[0], device, parts,
                                                                 options)
        config.update(target_config, dtype=dtype_name(dtype),
                      input_dim=X.shape[1], num_data=num_data,
                      feature_names=check_feature_names(names, X.shape[1], "the columns of X"))
        problems += self._target_scale_problems(y, target_buffers, options)
        if problems:
            warnings.warn(f"{type(self).__name__}: badly scaled data: {'; '.join(problems)}",
                          ScaleWarning, stacklevel=3)
        self._build(config, parts)
        self.to(device)
        with torch.no_grad():
            for name, value in {"x_shift": x_shift, "x_scale": x_scale, **target_buffers}.items():
                if getattr(self, name) is None:  # data-sized, declared empty by _build
                    setattr(self, name, value.to(device))
                else:
                    getattr(self, name).copy_(value)
        self.X, self.y = X, y
        try:
            with self._pooled_data():
                self._initialise(options)
        except ValueError as err:
            if "floor" not in str(err):
                raise
            raise ValueError(f"{err}: the starting value taken from the data is below the "
                             "parameter's floor, so the data are on a scale the defaults cannot "
                             "represent; pass standardize_X=True and/or standardize_y=True (or "
                             "rescale the data, or give the value yourself)") from None
        self._synchronise()

    # -- the construction path ------------------------------------------------------------
    @contextmanager
    def _pooled_data(self) -> Iterator[None]:
        """With data sharded over ranks, X and y are the rows of all ranks (at most
        `distributed.POOLED_ROWS`) while data-based starting values are taken, so that they
        are those of all the data — one process's when it has no more rows."""
        if not (self.shards_data and is_distributed()):
            yield
            return
        X, y = self.X, self.y
        self.X, self.y = pooled_rows([X, y], POOLED_ROWS, 0, "the rows starting values are "
                                     "taken from")
        try:
            yield
        finally:
            self.X, self.y = X, y

    def _moments(self, T: Tensor) -> tuple[Tensor, Tensor]:
        return column_mean_std(T) if self.shards_data else local_mean_std(T)

    @abstractmethod
    def _prepare_targets(self, y: Any, n: int, device: torch.device, parts: dict[str, Any],
                         options: O) -> tuple[Tensor, dict[str, Tensor], dict[str, Any]]:
        """Validate the targets: (targets as the objective uses them, values of the target
        buffers that `_build` declares (e.g. the units of y), config entries they imply)."""

    def _target_scale_problems(self, y: Tensor, buffers: dict[str, Tensor], options: O
                               ) -> list[str]:
        """Badly scaled targets (regression models say; classifiers have labels)."""
        return []

    def _configure(self, X: Tensor, options: O, x_shift: Tensor, x_scale: Tensor
                   ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Validate the options against the data: (plain config, modules). Subclasses extend
        both."""
        kernel = options.kernel
        if kernel is None:
            kernel = SquaredExponential(ard=True)
        if not isinstance(kernel, Kernel):
            raise TypeError(f"kernel must be a sparsegp kernel; got {type(kernel).__name__}")
        if isinstance(kernel, Separate) and not self.separate_kernels:
            raise TypeError(f"{type(self).__name__} takes one kernel: kernels.Separate (one "
                            "kernel per output) is for SGPR and SVGP with y [N, P]")
        # on the data's device from here on: inducing inputs given as tensors there are checked
        # against the kernel before the model moves as a whole
        return {"jitter": options.jitter}, {"kernel": kernel.to(X.device),
                                            "mean": as_mean(options.mean).to(X.device)}

    def _build(self, config: dict[str, Any], parts: dict[str, Any]) -> None:
        """Declare the structure from a config and its modules (construction and `load`)."""
        self._config = {k: v for k, v in config.items() if k not in PARTS}
        self.kernel = parts["kernel"].to(dtype=PARAMETER_DTYPE)
        # the prior mean m(x) (models saved before means existed have none: zero)
        self.mean = parts.get("mean", Zero()).to(dtype=PARAMETER_DTYPE)
        self._jitter = float(config["jitter"])
        self._num_data = int(config["num_data"])
        D = int(config["input_dim"])
        self.register_buffer("x_shift", torch.zeros(D, dtype=PARAMETER_DTYPE))
        self.register_buffer("x_scale", torch.ones(D, dtype=PARAMETER_DTYPE))
        self.register_buffer("X", None, persistent=False)
        self.register_buffer("y", None, persistent=False)
        self._cache: tuple[Posterior, StateKey] | None = None
        self.metadata: dict[str, Any] = {}

    def _initialise(self, options: O) -> None:
        """Data-based starting values of the parameters the user did not give."""
        self.mean.initialise_from_data(self.X, self.y)

    def zero_mean_targets(self) -> Tensor:
        """y − m(X), internal units: the targets of the zero-mean GP the diagnostics see."""
        with torch.no_grad():
            return self.y - self.mean(self.X)

    def prior_mean(self) -> Mean | None:
        """The prior mean as the objectives take it: None when it is zero."""
        return None if isinstance(self.mean, Zero) else self.mean

    def _synchronise(self) -> None:
        """With sharded data, start every rank from rank 0's initial parameters."""
        if self.shards_data:
            check_same_on_all_ranks(", ".join(f"{name} {list(p.shape)}" for name, p
                                              in self.named_parameters()),
                                    "the parameters' shapes")
            broadcast_([p.data for p in self.parameters()], "the initial parameters")

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
    def feature_names(self) -> list[str] | None:
        """The names of the D input columns: those of a DataFrame X (or set here), else None.

        Saved with the model; a DataFrame passed for prediction must have exactly these
        columns in this order (a numpy array is taken by position)."""
        names = self._config.get("feature_names")
        return None if names is None else list(names)

    @feature_names.setter
    def feature_names(self, names: Any) -> None:
        self._config["feature_names"] = check_feature_names(names, self.input_dim)

    @property
    def device(self) -> torch.device:
        return self.x_shift.device

    # -- objective and training -----------------------------------------------------------
    def _target_signal_variance(self) -> float:
        """The kernel's starting variance for Gaussian targets: var(y − m(X)) of one output,
        the observed values' variance of several (NaN: missing)."""
        with torch.no_grad():
            return signal_variance(self.y[~torch.isnan(self.y)] if self.y.dim() == 2
                                   else self.y - self.mean(self.X))

    def _require_data(self) -> None:
        if self.X is None:
            raise RuntimeError(
                f"this {type(self).__name__} was loaded without its training data: it can "
                "predict with its saved posterior but not evaluate or fit an objective, nor "
                "change what the posterior is built from (save with include_data=True for that)"
            )

    def training_plan(self, options: FitOptions) -> TrainingPlan:
        """L-BFGS-B on the objective (+ log priors): `maxiter` (2000), `tol`, `progress`,
        `callback`; see `training.fit_lbfgsb`. Without `tol` it stops once its gains have
        stalled (`fitting.stall_rule`) or, where `fitting.settle_rule` is on and the model
        probes its predictions (`_prediction_probe`), once they have settled; `tol` gives
        scipy's tolerances.
        With `diagnose` (where the model takes it; default True) the fitted model is then
        checked (`_check_fit`)."""
        return TrainingPlan("L-BFGS-B on the objective", self.fit_options, self._fit_lbfgsb)

    def _fit_lbfgsb(self, options: FitOptions) -> FitResult:
        with threads_for(self.evaluation_work()):
            result = fit_lbfgsb(self, maxiter=default(options.maxiter, MAXITER), tol=options.tol,
                                progress=options.progress, callback=options.callback,
                                lockstep=self.shards_data and is_distributed(),
                                stall=stall_rule(self.num_data, options),
                                settle=settle_rule(options), probe=self._prediction_probe())
        if ("diagnose" in self.fit_options and options.diagnose is not False
                and not result.interrupted):
            self._check_fit(stacklevel=5, result=result)
        return result

    def _prediction_probe(self) -> Any:
        """The predictions the settling rule follows (`training.settle.Probe`), or None (here:
        the objective's stall rule alone decides)."""
        return None

    def _check_fit(self, stacklevel: int, result: FitResult) -> None:
        """Check a fitted model and warn about what tripped (models that take `diagnose`):
        `stacklevel` makes a warning issued by a function `_check_fit` calls point at the
        caller of `fit()`; `result` is the fit's (what it cost: the checks' budget)."""

    def evaluation_work(self) -> float:
        """Flops of one objective evaluation, roughly (N·M² + M³ with M inducing variables,
        N³ without): small problems train on one thread (`threads.threads_for`)."""
        N = float(self.num_data)
        M = float(getattr(self, "num_inducing", N))
        return (N * M * M + M**3) * getattr(self.kernel, "evaluation_cost", 1)

    def _internal_inputs(self, Xnew: Any, name: str = "Xnew") -> Tensor:
        """Xnew in the model's internal (standardised) units, float64; a tensor keeps its
        graph (see `predictions`)."""
        check_columns(Xnew, self.feature_names, name)
        X = prediction_inputs(Xnew, name, self.input_dim, self.dtype, self.device)
        return (X - self.x_shift) / self.x_scale

    # -- what users read, continued --------------------------------------------------------
    def summary(self, labels: dict[str, list[str]] | None = None) -> str:
        """The table of `Parameterised.summary`; with `feature_names`, per-input parameters
        of the kernel and the mean (ARD lengthscales, linear weights: one value per column)
        are listed by column name."""
        names = self.feature_names
        if labels is None and names is not None:
            labels = self._column_labels(names)
        table = super().summary(labels)
        standardised = [what for what, scale in (("X", self.x_scale),
                                                 ("y", getattr(self, "y_scale", None)))
                        if scale is not None and not bool((scale == 1).all())]
        if standardised:  # the parameters then live in the standardised units
            table += (f"\n(values in the model's internal units: {' and '.join(standardised)} "
                      "standardised; model.noise_variance and model.inducing_points give "
                      "them in your units)")
        return table

    def _column_labels(self, names: list[str]) -> dict[str, list[str]]:
        """The per-input parameters of the kernel and the mean (`per_input`) with one value
        per column they see (a kernel inside `kernels.Active` sees its `dims`), by name."""
        everything = list(range(len(names)))
        seen = columns_seen(self.kernel, everything)
        labels = {}
        for prefix, root in (("kernel", self.kernel), ("mean", self.mean)):
            for path, part in root.named_modules():
                columns = seen.get(id(part), everything)
                for leaf in getattr(part, "per_input", ()):
                    value = part.value(leaf)
                    if value.dim() == 1 and value.shape[0] == len(columns):
                        labels[".".join(p for p in (prefix, path, leaf) if p)] = [
                            names[c] for c in columns]
        return labels

    def __repr__(self) -> str:
        return f"{type(self).__name__}(N={self._num_data}, D={self.input_dim})\n{self.summary()}"
