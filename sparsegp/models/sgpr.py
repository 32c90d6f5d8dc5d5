"""Sparse GP regression with the collapsed pseudo-point family: VFE, FITC, DTC, Power EP."""

from __future__ import annotations

import numbers
from typing import Any

import torch
from torch import Tensor

from ..config import DEFAULT_JITTER
from ..features.inducing_points import InducingPoints
from ..kernels.base import Kernel
from ..objectives.collapsed import (
    collapsed_objective,
    family,
    posterior_factors,
    titsias_upper_bound,
)
from ..posteriors import SparsePosterior
from .inducing import InducingPointsMixin
from .regression import GPModel


class SGPR(InducingPointsMixin, GPModel):
    """Sparse GP regression with M inducing inputs, O(N M²) (Bui, Yan & Turner 2017).

    approximation: "vfe" (Titsias 2009, a lower bound on log p(y)), "fitc" (Snelson &
    Ghahramani 2006), "dtc" (Seeger et al. 2003) or "pep" (Power EP with `alpha` in (0, 1];
    α = 1 is FITC, α → 0 is VFE). `inducing_points` is an int M (chosen from X by seeded
    k-means++, or `inducing_init="random"`) or an array [M, D]; default min(N, 100).
    Shapes: X [N, D], y [N]. When a torch.distributed process group is initialised, X and y
    are this rank's shard: the objective, its gradient and the posterior are those of all
    shards, every rank starts from rank 0's initial parameters, and `fit` runs in lock-step.
    `chunk_size` rows of data are processed at a time (memory
    O(chunk·M + M²), in the gradient too; default from a memory budget). `jitter` is relative
    to mean diag Kuu. `compute_dtype=torch.float32` evaluates the N·M² work (kernel matrices,
    products, triangular solves) in float32, e.g. on a GPU, while the parameters and the M×M
    factorisations stay in the model's dtype; expect ~1e-6 relative accuracy, and worse for
    FITC/PEP when Kuu is ill-conditioned.
    """

    shards_data = True

    def __init__(
        self, X: Any, y: Any, kernel: Kernel | None = None, inducing_points: Any = None,
        approximation: str = "vfe", alpha: float | None = None, noise_variance: Any = None, *,
        jitter: float = DEFAULT_JITTER, chunk_size: int | None = None,
        compute_dtype: torch.dtype | None = None, inducing_init: str = "kmeans++", seed: int = 0,
        standardize_X: bool = False, standardize_y: bool = False, dtype: torch.dtype | None = None,
    ) -> None:
        fam = family(approximation, alpha)
        super().__init__(X, y, kernel, noise_variance, jitter=jitter,
                         standardize_X=standardize_X, standardize_y=standardize_y, dtype=dtype)
        self._init_inducing(inducing_points, inducing_init, seed)
        self._configure(fam, chunk_size, compute_dtype)
        self._synchronise()

    def _configure(self, fam: Any, chunk_size: int | None, compute_dtype: torch.dtype | None
                   ) -> None:
        if compute_dtype not in (None, torch.float32, torch.float64):
            raise TypeError(f"compute_dtype must be torch.float32, torch.float64 or None; "
                            f"got {compute_dtype!r}")
        if chunk_size is not None and (
            isinstance(chunk_size, bool) or not isinstance(chunk_size, numbers.Integral)
            or chunk_size < 1
        ):
            raise ValueError(f"chunk_size must be a positive integer or None; got {chunk_size!r}")
        self._family = fam
        self.chunk_size = None if chunk_size is None else int(chunk_size)
        self.compute_dtype = compute_dtype

    # -- what users read ------------------------------------------------------------------
    @property
    def approximation(self) -> str:
        return self._family.name

    @property
    def alpha(self) -> float | None:
        return self._family.alpha

    # -- objectives -----------------------------------------------------------------------
    def _objective(self) -> Tensor:
        return collapsed_objective(self.kernel, self.feature, self.X, self.y,
                                   self.value("noise_variance"), self._family, self.jitter,
                                   self.chunk_size, self.compute_dtype)

    def upper_bound(self) -> float:
        """Titsias (2014) upper bound on the exact log evidence at the current parameters."""
        self._require_data()
        with torch.no_grad():
            U = titsias_upper_bound(self.kernel, self.feature, self.X, self.y,
                                    self.value("noise_variance"), self.jitter, self.chunk_size,
                                    self.compute_dtype)
        return float(U) + self._objective_offset()

    def _build_posterior(self) -> SparsePosterior:
        noise = self.value("noise_variance")
        f = posterior_factors(self.kernel, self.feature, self.X, self.y, noise, self._family,
                              self.jitter, self.chunk_size, self.compute_dtype)
        return SparsePosterior(self.kernel, self.feature, f.L, f.L_B, f.w, f.C, noise, f.jitter)

    # -- persistence ----------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        return {**super().config(), "approximation": self._family.name,
                "alpha": self._family.alpha if self._family.name == "pep" else None,
                "chunk_size": self.chunk_size, "num_inducing": self.num_inducing,
                "compute_dtype": None if self.compute_dtype is None else str(self.compute_dtype)}

    @classmethod
    def _restore(cls, config: dict[str, Any], state: dict[str, Tensor]) -> SGPR:
        model = super()._restore(config, state)
        dtype = {None: None, "torch.float32": torch.float32, "torch.float64": torch.float64}
        model._configure(family(config["approximation"], config["alpha"]), config["chunk_size"],
                         dtype[config.get("compute_dtype")])
        model.feature = InducingPoints(state["feature.Z"])
        return model

    def _restore_posterior(self, saved: dict[str, Any]) -> SparsePosterior:
        return SparsePosterior.from_state(self.kernel, self.feature, saved)
