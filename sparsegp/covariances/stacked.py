"""Separate inducing sets for the parts of a sum of kernels (van der Wilk 2018, §5.7.2).

u_i = ∫ f_i v_i for independent parts f_i of f = Σ_i f_i, so cov(u_i, u_j) = 0 for i ≠ j:
Kuu = blockdiag_i Kuu(v_i, k_i), Kuf = [Kuf(v_i, k_i, X)]_i stacked by rows. The Cholesky
factor is block diagonal too and is computed block by block (`Kuu_cholesky`), so no matrix
larger than one block's M_i × M_i is ever factorised.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..features.stacked import Stacked
from ..kernels.base import Sum
from ..linalg import jittered_cholesky
from .registry import Kuf, Kuu, paired, register, width


@register("Kuu", Stacked, Sum)
def _kuu_stacked(feature: Stacked, kernel: Sum) -> Tensor:
    return torch.block_diag(*(Kuu(f, k) for f, k in paired(feature, kernel)))


@register("Kuf", Stacked, Sum)
def _kuf_stacked(feature: Stacked, kernel: Sum, X: Tensor) -> Tensor:
    return torch.cat([Kuf(f, k, X) for f, k in paired(feature, kernel)], 0)


@register("width", Stacked, Sum)
def _width_stacked(feature: Stacked, kernel: Sum) -> int:
    return sum(width(f, k) for f, k in paired(feature, kernel))


@register("cholesky", Stacked, Sum)
def _cholesky_stacked(feature: Stacked, kernel: Sum, jitter: float, name: str
                      ) -> tuple[Tensor, float]:
    factors = [jittered_cholesky(Kuu(f, k), jitter, name=f"{name} block {i}")
               for i, (f, k) in enumerate(paired(feature, kernel))]
    return torch.block_diag(*(L for L, _ in factors)), max(j for _, j in factors)
