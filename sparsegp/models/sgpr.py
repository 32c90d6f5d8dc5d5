"""Sparse GP regression with the collapsed pseudo-point family: VFE, FITC, DTC, Power EP."""

from __future__ import annotations

import numbers
from typing import Any

import torch
from torch import Tensor

from ..config import DEFAULT_JITTER
from ..kernels.base import Kernel
from ..objectives.collapsed import (
    CollapsedProblem,
    collapsed_objective,
    family,
    posterior_q,
    titsias_upper_bound,
)
from ..posteriors import SparsePosterior
from .inducing import InducingMixin, resolve_feature
from .regression import GPModel

_COMPUTE_DTYPES = {None: None, "float32": torch.float32, "float64": torch.float64}


class SGPR(InducingMixin, GPModel):
    """Sparse GP regression with M inducing variables, O(N M²) (Bui, Yan & Turner 2017).

    approximation: "vfe" (Titsias 2009, a lower bound on log p(y)), "fitc" (Snelson &
    Ghahramani 2006), "dtc" (Seeger et al. 2003) or "pep" (Power EP with `alpha` in (0, 1];
    α = 1 is FITC, α → 0 is VFE). `inducing_points` is an int M (chosen
    from X by seeded k-means++, or `inducing_init="random"`), an array [M, D], or any
    registered inducing feature (`sparsegp.features`: inter-domain features such as
    `Multiscale` or `SumOfDeltas`); default min(N, 100) inducing points.
    Shapes: X [N, D], y [N]. When a torch.distributed process group is initialised, X and y
    are this rank's shard: the objective, its gradient and the posterior are those of all
    shards, every rank starts from rank 0's initial parameters, and `fit` runs in lock-step.
    `chunk_size` rows of data are processed at a time (memory
    O(chunk·M + M²), in the gradient too; default from a memory budget). `jitter` is relative
    to mean diag Kuu. `compute_dtype=torch.float32` (the default for float32 data) evaluates
    the N·M² work (kernel matrices, products, triangular solves) in float32, e.g. on a GPU,
    while the parameters and the M×M factorisations stay in float64; expect ~1e-6 relative
    accuracy, and worse for FITC/PEP when Kuu is ill-conditioned.
    """

    shards_data = True

    def __init__(
        self, X: Any, y: Any, kernel: Kernel | None = None, inducing_points: Any = None,
        approximation: str = "vfe", alpha: float | None = None, noise_variance: Any = None, *,
        jitter: float = DEFAULT_JITTER, chunk_size: int | None = None,
        compute_dtype: torch.dtype | None = None, inducing_init: str = "kmeans++", seed: int = 0,
        standardize_X: bool = False, standardize_y: bool = False, dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(X, y, dtype=dtype, standardize_X=standardize_X, kernel=kernel,
                         inducing_points=inducing_points, approximation=approximation,
                         alpha=alpha, noise_variance=noise_variance, jitter=jitter,
                         chunk_size=chunk_size, compute_dtype=compute_dtype,
                         inducing_init=inducing_init, seed=seed, standardize_y=standardize_y)

    def _configure(self, X: Tensor, *, inducing_points: Any, approximation: str,
                   alpha: float | None, chunk_size: int | None, compute_dtype: Any,
                   inducing_init: str, seed: int, x_shift: Tensor, x_scale: Tensor,
                   **arguments: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        fam = family(approximation, alpha)
        config, parts = super()._configure(X, x_shift=x_shift, x_scale=x_scale, **arguments)
        if compute_dtype not in (None, torch.float32, torch.float64):
            raise TypeError(f"compute_dtype must be torch.float32, torch.float64 or None; "
                            f"got {compute_dtype!r}")
        if chunk_size is not None and (
            isinstance(chunk_size, bool) or not isinstance(chunk_size, numbers.Integral)
            or chunk_size < 1
        ):
            raise ValueError(f"chunk_size must be a positive integer or None; got {chunk_size!r}")
        parts["feature"] = resolve_feature(inducing_points, parts["kernel"], X, x_shift, x_scale,
                                           inducing_init, seed)
        config.update(approximation=fam.name, alpha=fam.alpha if fam.name == "pep" else None,
                      chunk_size=None if chunk_size is None else int(chunk_size),
                      compute_dtype=None if compute_dtype is None
                      else str(compute_dtype).replace("torch.", ""))
        return config, parts

    def _build(self, config: dict[str, Any], parts: dict[str, Any]) -> None:
        super()._build(config, parts)
        self._family = family(config["approximation"], config["alpha"])
        self.chunk_size = config["chunk_size"]
        # float32 models do the N·M² work in float32 unless told otherwise
        self.compute_dtype = (_COMPUTE_DTYPES[config["compute_dtype"]]
                              or (torch.float32 if self.dtype == torch.float32 else None))
        self.feature = parts["feature"]

    # -- what users read ------------------------------------------------------------------
    @property
    def approximation(self) -> str:
        return self._family.name

    @property
    def alpha(self) -> float | None:
        return self._family.alpha

    # -- objectives -----------------------------------------------------------------------
    def collapsed_problem(self) -> CollapsedProblem:
        """The model's objective as a pure value (internal units): kernel, feature, data,
        noise, family member and evaluation options — what diagnostics work on."""
        self._require_data()
        return CollapsedProblem(self.kernel, self.feature, self.X, self.y,
                                self.value("noise_variance"), self._family, self.jitter,
                                self.chunk_size, self.compute_dtype)

    def _objective(self) -> Tensor:
        return collapsed_objective(self.collapsed_problem())

    def upper_bound(self) -> float:
        """Titsias (2014) upper bound on the exact log evidence at the current parameters."""
        with torch.no_grad():
            U = titsias_upper_bound(self.collapsed_problem())
        return float(U) + self._objective_offset()

    def _build_posterior(self) -> SparsePosterior:
        L, q, used = posterior_q(self.collapsed_problem())
        return SparsePosterior(self.kernel, self.feature, L, q, self.value("noise_variance"), used)

    def _restore_posterior(self, saved: dict[str, Any]) -> SparsePosterior:
        return SparsePosterior.from_state(self.kernel, self.feature, saved)
