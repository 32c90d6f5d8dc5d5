"""Inducing points: u = f(Z), the feature v(x; m) = δ(x − z_m). Data only."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .base import InducingFeature, checked_array
from .initialisation import initial_inducing_inputs


class InducingPoints(InducingFeature):
    """Inducing inputs Z [M, D], a trainable parameter: u_m = f(z_m)."""

    def __init__(self, Z: Any) -> None:
        super().__init__()
        self._add_free("Z", checked_array(Z, "inducing points", 2))

    @property
    def num_inducing(self) -> int:
        return self.Z.shape[0]

    @property
    def input_dim(self) -> int:
        return self.Z.shape[1]

    def config(self) -> dict[str, Any]:
        return {"type": type(self).__name__, "args": {"shape": list(self.Z.shape)}}

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> InducingPoints:
        return cls(torch.zeros(cfg["args"]["shape"], dtype=torch.float64))

    def transformed(self, shift: Tensor, scale: Tensor) -> InducingPoints:
        return type(self)((self.Z.detach() - shift) / scale)

    def locations(self) -> Tensor:
        return self.Z

    def set_locations(self, Z: Tensor) -> None:
        self.set_value("Z", Z)

    def extended(self, Z: Tensor) -> InducingPoints:
        return type(self)(torch.cat([self.Z.detach(), Z.to(self.Z)], 0))

    @classmethod
    def from_data(cls, X: Any, num_inducing: int, *, seed: int = 0, method: str = "kmeans++"
                  ) -> InducingPoints:
        """M inputs chosen from X by seeded k-means++ (or `method="random"` rows)."""
        return cls(initial_inducing_inputs(X, num_inducing, method, seed))
