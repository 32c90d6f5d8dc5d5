"""Exact GP regression (Rasmussen & Williams 2006, §2.2, eq. 2.30)."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from ..linalg import LOG_2PI, jittered_cholesky, log_det_from_cholesky, solve_lower


class ExactFactors(NamedTuple):
    """L Lᵀ = K + σ²I and a = L⁻¹y."""

    L: Tensor  # [N, N]
    a: Tensor  # [N]
    jitter: float


def exact_factors(K: Tensor, y: Tensor, noise_variance: Tensor, jitter: float = 0.0) -> ExactFactors:
    """Factorise K + σ²I (or K + diag σ²_n for a noise per point [N]). Shapes: K [N, N], y [N]."""
    if noise_variance.dim() == 0:
        noise_variance = noise_variance.expand(K.shape[0])
    L, used = jittered_cholesky(K + torch.diag_embed(noise_variance), jitter, name="K + σ²I")
    return ExactFactors(L, solve_lower(L, y), used)


def exact_log_marginal_likelihood(
    K: Tensor, y: Tensor, noise_variance: Tensor, jitter: float = 0.0
) -> Tensor:
    """log N(y | 0, K + σ²I) = −½ yᵀ(K+σ²I)⁻¹y − ½ log|K+σ²I| − (N/2) log 2π.

    Shapes: K [N, N], y [N], noise_variance [] -> [].
    """
    L, a, _ = exact_factors(K, y, noise_variance, jitter)
    return -0.5 * (a @ a) - 0.5 * log_det_from_cholesky(L) - 0.5 * y.shape[0] * LOG_2PI
