"""Multi-scale features with the squared-exponential kernel (docs/math.md §8; Walder et al. 2008).

With A_md = ℓ_d² + δ_md² (window m widened by the kernel):
  Kuf[m, n] = σ² Π_d (ℓ_d²/A_md)^½ exp(−½ Σ_d (x_nd − z_md)²/A_md),
  Kuu[m, m'] = σ² Π_d (ℓ_d²/T_d)^½ exp(−½ Σ_d (z_md − z_m'd)²/T_d),  T_d = ℓ_d² + δ_md² + δ_m'd².
Checked against numerical integration in tests/covariances/test_interdomain.py.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..features.multiscale import Multiscale
from ..kernels.stationary import SquaredExponential
from .registry import register


def gaussian_window_exponent(X: Tensor, centres: Tensor, A: Tensor) -> Tensor:
    """Σ_d (x_nd − μ_md)²/A_md for every (m, n) by matrix products. Shapes: X [N, D],
    centres and A [M, D] -> [M, N] (inputs shifted by a common centre against cancellation)."""
    c = centres.detach().mean(0)
    Xs, Ms, W = X - c, centres - c, 1.0 / A
    quad = (Xs * Xs) @ W.mT - 2.0 * Xs @ (Ms * W).mT + (Ms * Ms * W).sum(-1)
    return quad.mT.clamp_min(0.0)


def _lengthscales(kernel: SquaredExponential, D: int) -> Tensor:
    return kernel.value("lengthscale").expand(D)


@register("Kuf", Multiscale, SquaredExponential)
def _kuf(feature: Multiscale, kernel: SquaredExponential, X: Tensor) -> Tensor:
    ell2 = _lengthscales(kernel, feature.input_dim) ** 2
    d2 = feature.value("scales") ** 2
    log_pref = -0.5 * torch.log1p(d2 / ell2).sum(-1)  # [M]
    quad = gaussian_window_exponent(X, feature.Z, ell2 + d2)
    return kernel.value("variance") * torch.exp(log_pref[:, None] - 0.5 * quad)


@register("Kuu", Multiscale, SquaredExponential)
def _kuu(feature: Multiscale, kernel: SquaredExponential) -> Tensor:
    ell2 = _lengthscales(kernel, feature.input_dim) ** 2
    d2 = feature.value("scales") ** 2
    Z = feature.Z
    exponent = torch.zeros(Z.shape[0], Z.shape[0], dtype=Z.dtype, device=Z.device)
    for d in range(feature.input_dim):  # [M, M] temporaries only
        T = ell2[d] + d2[:, d, None] + d2[None, :, d]
        diff = Z[:, d, None] - Z[None, :, d]
        exponent = exponent - 0.5 * (torch.log(T / ell2[d]) + diff * diff / T)
    return kernel.value("variance") * torch.exp(exponent)
