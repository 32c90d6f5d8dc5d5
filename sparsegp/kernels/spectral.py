"""Spectral densities of stationary kernels, for random Fourier features (Rahimi & Recht 2008).

By Bochner's theorem a stationary k(x − x') = σ² ∫ p(ω) cos(ωᵀ(x − x')) dω, so with ω_r ~ p
and φ(x) = √(σ²/R) [cos(ω_rᵀx), sin(ω_rᵀx)]_r, φ(x)ᵀφ(x') is an unbiased estimate of
k(x, x') with ‖φ(x)‖² = σ² exactly. With lengthscales ℓ, ω = ε/ℓ for ε from the unit
lengthscale's density: the standard normal for the squared exponential, and the multivariate
Student t with 2ν degrees of freedom for Matérn ν (ν = 1/2, 3/2, 5/2).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .base import Kernel
from .stationary import Matern12, Matern32, Matern52, SquaredExponential

#: 2ν, the Student-t degrees of freedom of each Matérn kernel's spectral density.
_MATERN_DOF: dict[type[Kernel], float] = {Matern12: 1.0, Matern32: 3.0, Matern52: 5.0}


def spectral_samples(kernel: Kernel, num: int, dim: int, generator: torch.Generator) -> Tensor:
    """ε [num, dim] from the spectral density of `kernel` at unit lengthscale (seeded)."""
    z = torch.randn(num, dim, generator=generator, dtype=torch.float64)
    if type(kernel) is SquaredExponential:
        return z
    dof = _MATERN_DOF.get(type(kernel))
    if dof is None:
        raise TypeError(f"random Fourier features need a kernel with a known spectral density "
                        f"(SquaredExponential, Matern12, Matern32, Matern52); got "
                        f"{type(kernel).__name__}")
    # multivariate t: z / √(u/ν') with u ~ χ²(ν') shared by the dimensions of one sample
    u = _chi2(dof, num, generator)
    return z / torch.sqrt(u / dof)


def _chi2(dof: float, num: int, generator: torch.Generator) -> Tensor:
    """χ²(dof) samples [num, 1] for dof ∈ {1, 3, 5}: sums of squared standard normals."""
    k = int(round(dof))
    g = torch.randn(num, k, generator=generator, dtype=torch.float64)
    return (g * g).sum(-1, keepdim=True)


def feature_map(X: Tensor, omega: Tensor, variance: Tensor) -> Tensor:
    """φ(X) = √(σ²/R)[cos(Xω), sin(Xω)]ᵀ. Shapes: X [N, D], ω [R, D] -> [2R, N]."""
    proj = omega @ X.mT  # [R, N]
    scale = torch.sqrt(variance / omega.shape[0])
    return scale * torch.cat([torch.cos(proj), torch.sin(proj)], 0)
