"""Inducing points: u = f(Z), the feature v(x; m) = δ(x − z_m). Data only."""

from __future__ import annotations

import torch
from torch import Tensor

from ..validation import ArrayLike
from .base import PointSet
from .initialisation import initial_inducing_inputs


class InducingPoints(PointSet):
    """Inducing inputs Z [M, D], a trainable parameter: u_m = f(z_m).

    Shapes: Z [M, D]; with a kernel, Kuu = k(Z, Z) [M, M] and Kuf = k(Z, X) [M, N]. A sparse
    model builds these itself from `inducing_points=M` (k-means++ on X) or an array [M, D];
    pass an `InducingPoints` to share or prepare one (`from_data`).

    Example:

        >>> import numpy as np, sparsegp as sg
        >>> Z = sg.features.InducingPoints(np.linspace(0, 6, 8)[:, None])
        >>> Z.num_inducing, Z.input_dim, tuple(Z.Z.shape)
        (8, 1, (8, 1))
        >>> X, y = sg.datasets.snelson()
        >>> sg.features.InducingPoints.from_data(X, 5, seed=0).Z.shape
        torch.Size([5, 1])
        >>> m = sg.SGPR(X[::4], y[::4], inducing_points=Z)
        >>> m.inducing_points.shape
        (8, 1)
    """

    def transformed(self, shift: Tensor, scale: Tensor) -> InducingPoints:
        return type(self)((self.Z.detach() - shift) / scale)

    def locations(self) -> Tensor:
        return self.Z

    def set_locations(self, Z: Tensor) -> None:
        self.set_value("Z", Z)

    def extended(self, Z: Tensor) -> InducingPoints:
        return type(self)(torch.cat([self.Z.detach(), Z.to(self.Z)], 0))

    def covers(self, X: Tensor, rows_per_chunk: int = 4096) -> bool:
        """Whether every row of X [N, D] is one of the inducing inputs (the same numbers):
        then Qff = Kff, and every member of the collapsed family is the exact GP. O(N·M·D),
        by chunks of rows, stopping at the first row that is not one."""
        Z = self.Z.detach()
        if X.shape[-1] != Z.shape[-1]:
            return False
        for start in range(0, X.shape[0], rows_per_chunk):
            rows = X[start:start + rows_per_chunk].detach().to(Z)
            if not bool((rows[:, None, :] == Z[None]).all(-1).any(1).all()):
                return False
        return True

    @classmethod
    def from_data(cls, X: ArrayLike, num_inducing: int, *, seed: int = 0, method: str = "kmeans++",
                  at_most: bool = False) -> InducingPoints:
        """M inputs chosen from X by seeded k-means++ (or `method="random"` rows); with
        `at_most=True`, no more than X has distinct rows."""
        return cls(initial_inducing_inputs(X, num_inducing, method, seed, at_most=at_most))
