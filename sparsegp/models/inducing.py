"""What every model with inducing points (SGPR, SGPC, SVGP) shares: Z, its start and its view."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
import torch

from ..features.inducing_points import InducingPoints
from ..validation import as_inputs
from .initialisation import initial_inducing_inputs


class InducingPointsMixin:
    """Inducing inputs Z in `self.feature` (internal units), read and set in the units of X.

    For `Model` subclasses: list it first among the bases.
    """

    _aliases = {"inducing_points": "feature.Z"}

    def _init_inducing(self, inducing_points: Any, method: str, seed: int) -> None:
        """`self.feature` from an int M (chosen from X by `method`), an array [M, D] in the
        units of X, or None (min(N, 100))."""
        if inducing_points is None:
            inducing_points = min(self.num_data, 100)
        elif not isinstance(inducing_points, numbers.Integral):
            inducing_points = self._internal_inputs(inducing_points, "inducing_points")
        self.feature = InducingPoints(initial_inducing_inputs(self.X, inducing_points, method, seed))

    @property
    def num_inducing(self) -> int:
        return self.feature.num_inducing

    @property
    def inducing_points(self) -> np.ndarray:
        """Inducing inputs Z [M, D], in the units of X."""
        return (self.feature.Z.detach() * self.x_scale + self.x_shift).cpu().numpy()

    @inducing_points.setter
    def inducing_points(self, Z: Any) -> None:
        Z = as_inputs(Z, "inducing_points", num_features=self.input_dim, dtype=self.dtype,
                      device=self.device)
        if Z.shape != self.feature.Z.shape:
            raise ValueError(f"inducing_points must have shape {tuple(self.feature.Z.shape)}; "
                             f"got {tuple(Z.shape)}")
        self.set_value("inducing_points", (Z - self.x_shift) / self.x_scale)

    def add_inducing_points(self, Znew: Any) -> None:
        """Append inducing inputs Znew [K, D] (units of X); M grows by K, a frozen Z stays frozen.

        Nothing is refitted; the next prediction rebuilds the cached posterior.
        """
        z = self._internal_inputs(Znew, "inducing_points")
        old = self.feature.Z
        self.feature = InducingPoints(torch.cat([old.detach(), z], 0))
        self.feature.Z.requires_grad_(old.requires_grad)
