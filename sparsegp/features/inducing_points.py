"""Inducing points: u = f(Z). Data only; the covariances live in `covariances.py`."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..parameters import Parameterised


class InducingPoints(Parameterised):
    """Inducing inputs Z [M, D], a trainable parameter."""

    def __init__(self, Z: Tensor) -> None:
        super().__init__()
        if not isinstance(Z, Tensor) or Z.dim() != 2 or Z.shape[0] == 0:
            raise ValueError(f"inducing points must be a non-empty 2-D array [M, D]; got {_shape(Z)}")
        if not bool(torch.isfinite(Z).all()):
            raise ValueError("inducing points contain NaN or inf")
        self._add_free("Z", Z.detach().clone())

    @property
    def num_inducing(self) -> int:
        return self.Z.shape[0]

    def __len__(self) -> int:
        return self.num_inducing

    def config(self) -> dict[str, Any]:
        return {"type": type(self).__name__, "shape": list(self.Z.shape)}


def _shape(Z: Any) -> Any:
    return tuple(Z.shape) if hasattr(Z, "shape") else type(Z).__name__
