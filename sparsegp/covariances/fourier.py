"""Fourier (time–)frequency features with the squared-exponential kernel (Lázaro-Gredilla &
Figueiras-Vidal 2009), derived afresh and checked against numerical integration
(tests/covariances/test_interdomain.py).

Window m: N(x; μ_m, diag c_m²) cos(φ_m + ω_mᵀ(x − μ_m)); kernel σ² exp(−½ Σ_d (x_d − x'_d)²/ℓ_d²).
By k = σ²(2π)^{D/2} Π ℓ_d N(x; x', Λ), the product of Gaussians, and the Gaussian
characteristic function, with A_md = ℓ_d² + c_md²:

  Kuf[m, n] = σ² Π_d (ℓ_d²/A_md)^½ exp(−½ Σ_d [(x_nd − μ_md)² + c_md²ℓ_d²ω_md²]/A_md)
              · cos(φ_m + Σ_d c_md² ω_md (x_nd − μ_md)/A_md),

a Gaussian bump around μ_m damped by the kernel's spectrum at ω_m, with the frequency shrunk by
c²/A. Integrating once more, with T_d = ℓ_d² + c_md² + c_m'd², Δ_d = μ_m'd − μ_md and
cos a cos b = ½[cos(a − b) + cos(a + b)]:

  Kuu[m, m'] = ½ σ² Π_d (ℓ_d²/T_d)^½ exp(−½ Σ_d Δ_d²/T_d)
               · Σ_{s = ±1} exp(−½ Σ_d [ℓ_d²(c_md²ω_md² + c_m'd²ω_m'd²) + c_md²c_m'd²(ω_md + s ω_m'd)²]/T_d)
                            · cos(φ_m + s φ_m' + Σ_d (c_md²ω_md − s c_m'd²ω_m'd) Δ_d/T_d).

Where the printed TFIF Kuu drops the centre-dependent phase shift, or damps both terms with
(ω − ω')², the matrix is indefinite; the joint covariance [[Kuu, Kuf], [Kfu, Kff]] is
positive semi-definite here (a test). Every exponent is ≤ 0: nothing overflows. Frequency
features (all windows at one centre) are the case Δ = 0.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..features.fourier import Fourier
from ..kernels.stationary import SquaredExponential
from .multiscale import gaussian_window_exponent
from .registry import register


@register("Kuf", Fourier, SquaredExponential)
def _kuf(feature: Fourier, kernel: SquaredExponential, X: Tensor) -> Tensor:
    ell2 = kernel.value("lengthscale").expand(feature.input_dim) ** 2
    c2, omega, mu = feature.value("widths") ** 2, feature.frequencies, feature.centres
    A = ell2 + c2  # [M, D]
    log_pref = -0.5 * torch.log1p(c2 / ell2).sum(-1)  # [M]
    damping = (c2 * ell2 * omega * omega / A).sum(-1)  # [M]
    quad = gaussian_window_exponent(X, mu, A)  # [M, N]
    P = c2 * omega / A  # [M, D]: the shrunk frequencies
    phase = feature.phases[:, None] + (X @ P.mT).mT - (P * mu).sum(-1)[:, None]
    return kernel.value("variance") * torch.exp(
        (log_pref - 0.5 * damping)[:, None] - 0.5 * quad) * torch.cos(phase)


@register("Kuu", Fourier, SquaredExponential)
def _kuu(feature: Fourier, kernel: SquaredExponential) -> Tensor:
    ell2 = kernel.value("lengthscale").expand(feature.input_dim) ** 2
    c2, omega, mu, phi = (feature.value("widths") ** 2, feature.frequencies, feature.centres,
                          feature.phases)
    M = omega.shape[0]
    common = torch.zeros(M, M, dtype=omega.dtype, device=omega.device)
    damping = {s: torch.zeros_like(common) for s in (1.0, -1.0)}
    shift = {s: torch.zeros_like(common) for s in (1.0, -1.0)}
    for d in range(feature.input_dim):  # [M, M] temporaries only
        cm, cn = c2[:, d, None], c2[None, :, d]
        wm, wn = omega[:, d, None], omega[None, :, d]
        T = ell2[d] + cm + cn
        delta = mu[None, :, d] - mu[:, d, None]  # μ_m' − μ_m
        common = common - 0.5 * (torch.log(T / ell2[d]) + delta * delta / T)
        spectral = ell2[d] * (cm * wm * wm + cn * wn * wn)
        for s in (1.0, -1.0):
            damping[s] = damping[s] - 0.5 * (spectral + cm * cn * (wm + s * wn) ** 2) / T
            shift[s] = shift[s] + (cm * wm - s * cn * wn) * delta / T
    total = sum(torch.exp(common + damping[s]) * torch.cos(phi[:, None] + s * phi[None, :] + shift[s])
                for s in (1.0, -1.0))
    return 0.5 * kernel.value("variance") * total
