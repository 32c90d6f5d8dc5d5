"""The naive baseline: Kuf materialised as one M×N matrix, autograd does the rest.

This is how the collapsed objectives are usually written (e.g. GPflow's SGPR): simple and
correct, but the forward pass holds several M×N matrices and autograd keeps them all for
the backward pass, so memory is O(N·M). The benchmarks time the streamed implementation
against it, and the tests use it as an independent autograd reference for the gradients.
`naive_collapsed` is for the squared exponential with inducing points; `naive_vfe` takes any
materialised covariances.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def se(A: Tensor, B: Tensor, lengthscale: Tensor, variance: Tensor) -> Tensor:
    """σ² exp(−½‖(a − b)/ℓ‖²). Shapes: A [n, D], B [m, D] -> [n, m]."""
    As, Bs = A / lengthscale, B / lengthscale
    r2 = (As * As).sum(-1)[:, None] + (Bs * Bs).sum(-1)[None, :] - 2.0 * As @ Bs.mT
    return variance * torch.exp(-0.5 * r2.clamp_min(0.0))


def naive_collapsed(Z: Tensor, lengthscale: Tensor, variance: Tensor, noise: Tensor, X: Tensor,
                    y: Tensor, approximation: str, alpha: float | None = None,
                    jitter: float = 1e-6) -> Tensor:
    """F for 'vfe', 'dtc', 'fitc' or 'pep' (docs/math.md §2), written the straightforward way."""
    N, M = X.shape[0], Z.shape[0]
    Kuu = se(Z, Z, lengthscale, variance)
    Kuu = Kuu + jitter * Kuu.diagonal().mean() * torch.eye(M, dtype=Z.dtype, device=Z.device)
    L = torch.linalg.cholesky(Kuu)
    A = torch.linalg.solve_triangular(L, se(Z, X, lengthscale, variance), upper=False)  # [M, N]
    d = variance - (A * A).sum(0)
    if approximation in ("vfe", "dtc"):
        lam = noise.expand(N)
    else:
        a = 1.0 if approximation == "fitc" else alpha
        lam = a * d.clamp_min(0.0) + noise
    Aw = A / torch.sqrt(lam)
    LB = torch.linalg.cholesky(torch.eye(M, dtype=Z.dtype, device=Z.device) + Aw @ Aw.mT)
    c = torch.linalg.solve_triangular(LB, (Aw @ (y / torch.sqrt(lam)))[:, None], upper=False)
    F = (-0.5 * N * math.log(2 * math.pi) - torch.log(LB.diagonal()).sum()
         - 0.5 * torch.log(lam).sum() - 0.5 * (y * y / lam).sum() + 0.5 * (c * c).sum())
    if approximation == "vfe":
        F = F - 0.5 * d.sum() / noise
    elif approximation == "pep":
        assert alpha is not None  # Power EP comes with its power
        if alpha < 1.0:
            F = F - 0.5 * (1.0 - alpha) / alpha * torch.log1p(alpha * d.clamp_min(0.0) / noise).sum()
    return F


def naive_vfe(Kuf: Tensor, Kuu: Tensor, kdiag: Tensor, y: Tensor, noise: Tensor,
              jitter: float = 1e-6) -> Tensor:
    """VFE (docs/math.md §2) from a materialised Kuf [M, N], Kuu [M, M] and diag Kff [N], for any
    inducing variables: the straightforward way, autograd for the gradient."""
    N, M = Kuf.shape[1], Kuu.shape[0]
    eye = torch.eye(M, dtype=Kuu.dtype, device=Kuu.device)
    L = torch.linalg.cholesky(Kuu + jitter * Kuu.diagonal().mean() * eye)
    A = torch.linalg.solve_triangular(L, Kuf, upper=False) / torch.sqrt(noise)  # [M, N]
    LB = torch.linalg.cholesky(eye + A @ A.mT)
    c = torch.linalg.solve_triangular(LB, (A @ y)[:, None], upper=False) / torch.sqrt(noise)
    return (-0.5 * N * torch.log(2 * math.pi * noise) - torch.log(LB.diagonal()).sum()
            - 0.5 * (y @ y) / noise + 0.5 * (c * c).sum()
            - 0.5 * (kdiag.sum() - noise * (A * A).sum()) / noise)
