"""Exact GP regression (Rasmussen & Williams 2006, §2.2, eq. 2.30)."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from ..linalg import (
    LOG_2PI,
    add_to_diagonal,
    jittered_cholesky,
    log_det_from_cholesky,
    solve_lower,
    solve_lower_t,
)


class ExactFactors(NamedTuple):
    """L Lᵀ = K + σ²I and a = L⁻¹y."""

    L: Tensor  # [N, N]
    a: Tensor  # [N]
    jitter: float


def exact_factors(K: Tensor, y: Tensor, noise_variance: Tensor, jitter: float = 0.0) -> ExactFactors:
    """Factorise K + σ²I (or K + diag σ²_n for a noise per point [N]). Shapes: K [N, N], y [N]."""
    L, used = jittered_cholesky(add_to_diagonal(K, noise_variance), jitter, name="K + σ²I")
    return ExactFactors(L, solve_lower(L, y), used)


def exact_log_marginal_likelihood(
    K: Tensor, y: Tensor, noise_variance: Tensor, jitter: float = 0.0
) -> Tensor:
    """log N(y | 0, K + σ²I) = −½ yᵀ(K+σ²I)⁻¹y − ½ log|K+σ²I| − (N/2) log 2π.

    Shapes: K [N, N], y [N], noise_variance [] or [N] -> []. The gradient is hand-derived
    (`_ExactEvidence`): with C = K + σ²I and α = C⁻¹y, ∂F/∂C = ½(ααᵀ − C⁻¹), formed from the
    Cholesky factor by one `cholesky_inverse` — several times faster than differentiating
    through the factorisation (N = 5000: 20 s → a few s), and with fewer N×N temporaries.
    A jitter added on a failed factorisation is treated as a constant.
    """
    if torch.is_grad_enabled() and any(t.requires_grad for t in (K, y, noise_variance)):
        return _ExactEvidence.apply(K, y, noise_variance, jitter)
    L, a, _ = exact_factors(K, y, noise_variance, jitter)
    return _value(L, a)


def _value(L: Tensor, a: Tensor) -> Tensor:
    return -0.5 * (a @ a) - 0.5 * log_det_from_cholesky(L) - 0.5 * a.shape[0] * LOG_2PI


class _ExactEvidence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, K: Tensor, y: Tensor, noise: Tensor,
                jitter: float) -> Tensor:
        L, a, _ = exact_factors(K, y, noise, jitter)
        ctx.save_for_backward(L, solve_lower_t(L, a))
        ctx.noise_shape = noise.shape
        return _value(L, a)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g: Tensor) -> tuple[Tensor | None, ...]:
        L, alpha = ctx.saved_tensors
        G = torch.cholesky_inverse(L)  # C⁻¹, then ∂F/∂C = ½(ααᵀ − C⁻¹) in place
        # a 0-dim tensor is a Scalar to torch (the stubs say numbers only)
        G.mul_(-0.5 * g).addr_(alpha, alpha, alpha=0.5 * g)  # type: ignore[arg-type]
        gK = G if ctx.needs_input_grad[0] else None
        gy = -g * alpha if ctx.needs_input_grad[1] else None
        gnoise = None
        if ctx.needs_input_grad[2]:
            diag = torch.diagonal(G)
            gnoise = diag.sum() if len(ctx.noise_shape) == 0 else diag.clone()
        return gK, gy, gnoise, None
