"""K_UU on a product grid: a Kronecker product of symmetric Toeplitz factors.

A stationary kernel that factorises over dimensions, k(x, x') = σ² Π_d ρ((x_d − x'_d)²/ℓ_d²)
(the squared exponential exactly; for Matérn kernels this product of 1-D Matérns is what
KISS-GP uses), gives on a regular grid K_UU = σ² ⊗_d T_d with T_d symmetric Toeplitz, defined
by its first column. A product with T_d costs O(G_d log G_d) by the FFT of its circulant
embedding (size 2G_d − 2); with K_UU, one such product per dimension along its axis.
Shapes: first columns c_d [G_d]; vectors V [Π G_d, k] (row-major grid order).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..kernels.stationary import RadialKernel


def first_columns(kernel: RadialKernel, spacing: Tensor, sizes: list[int]) -> list[Tensor]:
    """ρ((j·h_d)²/ℓ_d²), j = 0 … G_d − 1, per dimension (differentiable in ℓ)."""
    ell = kernel.value("lengthscale").expand(len(sizes))
    return [kernel.profile((torch.arange(g, dtype=spacing.dtype, device=spacing.device)
                            * spacing[d] / ell[d]) ** 2) for d, g in enumerate(sizes)]


def toeplitz_matmul(c: Tensor, V: Tensor, dim: int) -> Tensor:
    """T V along axis `dim` of V, T the symmetric Toeplitz matrix with first column c [G]."""
    G = c.shape[0]
    if G == 1:
        return c[0] * V
    embed = torch.cat([c, c[1:-1].flip(0)])  # circulant of size 2G − 2
    n = embed.shape[0]
    spectrum = torch.fft.rfft(embed)
    shape = [1] * V.dim()
    shape[dim] = spectrum.shape[0]
    out = torch.fft.irfft(torch.fft.rfft(V, n=n, dim=dim) * spectrum.view(shape), n=n, dim=dim)
    return out.narrow(dim, 0, G)


def kron_toeplitz_matmul(columns: list[Tensor], variance: Tensor, V: Tensor) -> Tensor:
    """K_UU V = σ² (⊗_d T_d) V for V [Π G_d, k]."""
    sizes = [c.shape[0] for c in columns]
    k = V.shape[1]
    X = V.reshape(*sizes, k)
    for d, c in enumerate(columns):
        X = toeplitz_matmul(c, X, d)
    return variance * X.reshape(-1, k)


def dense_kuu(columns: list[Tensor], variance: Tensor) -> Tensor:
    """K_UU formed (small grids and tests only)."""
    K = torch.ones(1, 1, dtype=columns[0].dtype, device=columns[0].device)
    for c in columns:
        G = c.shape[0]
        i = torch.arange(G, device=c.device)
        K = torch.kron(K, c[(i[:, None] - i[None, :]).abs()])
    return variance * K
