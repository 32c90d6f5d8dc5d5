"""The polynomial kernel."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
from torch import Tensor

from ..parameters import as_user_value
from ..runtime.config import POSITIVE_FLOOR
from ..validation import ArrayLike
from .base import as_inputs, check_input_pair
from .linear import VarianceOnly


class Polynomial(VarianceOnly):
    """k(x, x') = σ² (xᵀx' + c)^p for an integer degree p ≥ 1.

    The GP is a random polynomial of degree p in the inputs (all monomials up to p with c > 0;
    those of degree exactly p with c = 0). The variance σ² and the offset c are learned
    (positive, each with a floor); the degree is fixed. `offset=0` builds the homogeneous
    kernel σ² (xᵀx')^p, which has no offset parameter (degree 1: `Linear`). The inputs are
    used as given: standardise them (`standardize_X=True`) so that xᵀx' is of order 1.
    Shapes: variance [], offset []; X [N, D], X2 [N2, D] -> K [N, N2], K_diag [N]. An unset
    variance starts from the data: the signal variance over the mean of (‖x‖² + c)^p.

    Example:

        >>> import torch, sparsegp as sg
        >>> k = sg.kernels.Polynomial(degree=2, variance=0.5, offset=1.0)
        >>> X = torch.tensor([[1.0, 2.0], [0.0, 1.0]], dtype=torch.float64)
        >>> K = k.K(X)  # 0.5 (xᵀx' + 1)²
        >>> [round(v, 6) for v in K[0].tolist()], [round(v, 6) for v in k.K_diag(X).tolist()]
        ([18.0, 4.5], [18.0, 2.0])
        >>> k.config()["args"]["degree"], round(k.offset, 6)
        (2, 1.0)
    """

    variance_dims = 0  # one variance
    per_input = ()

    def __init__(self, degree: int = 2, variance: ArrayLike | None = None, offset: ArrayLike = 1.0
                 ) -> None:
        if (isinstance(degree, bool) or not isinstance(degree, numbers.Integral)
                or degree < 1):
            raise ValueError(f"degree must be an integer ≥ 1; got {degree!r}")
        super().__init__(variance)
        self.degree: int = int(degree)
        #: False: the homogeneous kernel (`offset=0`), without an offset parameter
        self.has_offset: bool = not _is_zero(offset)
        if self.has_offset:
            self._declare("offset", offset, 1.0, POSITIVE_FLOOR, max_dim=0)

    @property
    def offset(self) -> float | Any:
        return as_user_value(self.value("offset")) if self.has_offset else 0.0

    @offset.setter
    def offset(self, v: ArrayLike) -> None:
        if not self.has_offset:
            raise ValueError("this Polynomial kernel was built with offset=0 (homogeneous) and "
                             "has no offset parameter; build one with a positive offset")
        self._assign("offset", v)

    def _power(self, dot: Tensor) -> Tensor:
        """σ² (dot + c)^p elementwise."""
        if self.has_offset:
            dot = dot + self.value("offset")
        return self.value("variance") * dot.pow(self.degree)

    def K(self, X: Tensor, X2: Tensor | None = None) -> Tensor:
        check_input_pair(X, X2)
        return self._power(X @ (X if X2 is None else X2).mT)

    def K_blocks(self, X: Tensor) -> Tensor:
        return self._power(X @ X.mT)

    def K_diag(self, X: Tensor) -> Tensor:
        X = as_inputs(X)
        return self._power((X * X).sum(-1))

    def initialise_from_data(self, X: Tensor, signal_variance: float) -> None:
        if "variance" in self._unset:
            c = float(self.value("offset").detach()) if self.has_offset else 0.0
            scale = float((((X * X).sum(-1) + c) ** self.degree).mean())
            self._assign("variance", signal_variance / scale if scale > 0 else signal_variance)

    def config(self) -> dict[str, Any]:
        cfg = super().config()
        cfg["args"]["degree"] = self.degree
        if not self.has_offset:
            cfg["args"]["offset"] = 0.0
        return cfg

    def __repr__(self) -> str:
        # Polynomial(degree=p, variance=…, offset=…)
        return f"{type(self).__name__}(degree={self.degree}, " + super().__repr__().split("(", 1)[1]


def _is_zero(value: Any) -> bool:
    """True for a single number equal to 0 (the homogeneous kernel's offset)."""
    if value is None or isinstance(value, (str, bytes, bool)) or np.ndim(value) != 0:
        return False
    try:
        return float(value) == 0.0
    except (TypeError, ValueError):
        return False
