"""The prior's random features seen through an inducing feature: for a prior sample
f(x) = φ(x)ᵀw drawn from random Fourier features (`kernels.spectral.feature_map`), the
inducing variables u_m = ∫ f(x) v_m(x) dx of that same sample are u = Ψᵀw, with Ψ [2R, M]
the feature's functionals applied to the cos and sin rows of φ. Matheron's rule
(`pathwise`) needs that u to pair each prior function with its own inducing variables.

With f-rows √(σ²/R)·cos(ω_rᵀx) and √(σ²/R)·sin(ω_rᵀx), and E over a Gaussian window
x ~ N(μ, C) of cos(β + aᵀ(x − μ)) = exp(−½aᵀCa)·cos β (sin likewise):
- inducing points f(z_m): Ψ = φ(Z);
- sums of deltas Σ_c w_mc f(z_mc): Ψ = Σ_c w_mc φ(z_mc);
- multi-scale windows N(x; z_m, diag δ_m²): φ(z_m) damped by exp(−½ Σ_d ω_rd² δ_md²);
- Fourier windows N(x; μ_m, diag c_m²)·cos(φ_m + ω_mᵀ(x − μ_m)), with e± = exp(−½ Σ_d
  (ω_md ± ω_rd)² c_md²) and θ = ω_rᵀμ_m: cos-row ½[e₊cos(φ_m + θ) + e₋cos(φ_m − θ)],
  sin-row ½[e₊sin(φ_m + θ) − e₋sin(φ_m − θ)] (product-to-sum, then the window's mean).
Each is checked against the feature's own Kuf in the tests (Ψᵀφ(X) → Kuf as R grows).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ...features.deltas import SumOfDeltas
from ...features.fourier import Fourier
from ...features.inducing_points import InducingPoints
from ...features.multiscale import Multiscale
from ...kernels.spectral import feature_map


def inducing_feature_map(feature: nn.Module, omega: Tensor, variance: Tensor) -> Tensor:
    """Ψ [2R, M]: the feature's functionals of the random features with frequencies ω [R, D]
    and signal variance σ², so that u = Ψᵀw for the prior sample f = φᵀw."""
    if isinstance(feature, InducingPoints):
        return feature_map(feature.Z, omega, variance)
    if isinstance(feature, SumOfDeltas):
        Z, weights = feature.Z, feature.weights  # [M, C, D], [M, C]
        M, C, D = Z.shape
        phi = feature_map(Z.reshape(M * C, D), omega, variance).reshape(-1, M, C)
        return (phi * weights.to(phi.dtype)).sum(-1)
    if isinstance(feature, Multiscale):
        damping = torch.exp(-0.5 * (omega * omega) @ (feature.value("scales") ** 2).mT)  # [R, M]
        return feature_map(feature.Z, omega, variance) * damping.repeat(2, 1)
    if isinstance(feature, Fourier):
        c2 = feature.value("widths") ** 2  # [M, D]
        w_m, phase, mu = feature.frequencies, feature.phases, feature.centres
        plus = torch.exp(-0.5 * ((w_m[None] + omega[:, None]) ** 2 * c2).sum(-1))  # [R, M]
        minus = torch.exp(-0.5 * ((w_m[None] - omega[:, None]) ** 2 * c2).sum(-1))
        theta = omega @ mu.mT  # [R, M]
        cos = 0.5 * (plus * torch.cos(phase + theta) + minus * torch.cos(phase - theta))
        sin = 0.5 * (plus * torch.sin(phase + theta) - minus * torch.sin(phase - theta))
        return torch.sqrt(variance / omega.shape[0]) * torch.cat([cos, sin], 0)
    raise TypeError(f"pathwise samples need the prior's inducing variables for "
                    f"{type(feature).__name__} features, which are not available (inducing "
                    "points, sums of deltas, multi-scale and Fourier features have them): use "
                    "predict_f_samples at the points you need")
