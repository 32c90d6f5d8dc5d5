"""The evidence of KISS-GP (Wilson & Nickisch 2015): exact GP regression with the interpolated
kernel K̃ = W K_UU Wᵀ (`structured/`), by conjugate gradients and stochastic Lanczos quadrature.

  log p(y) = −½ yᵀA⁻¹y − ½ log|A| − (N/2) log 2π,   A = K̃ + σ²I,

with α = A⁻¹y by preconditioned CG, log|A| = log|P| + tr log(P⁻¹A) by SLQ on probes
z = L ε1 + σ ε2 ~ N(0, P) (fixed draws: the estimate is a deterministic function of the
hyperparameters, so L-BFGS can train it), and the gradient by the unbiased estimator
∂log p = ½ αᵀ ∂A α − ½ E[(A⁻¹z)ᵀ ∂A (P⁻¹z)] (− αᵀ∂m for a prior mean m), taken through
autograd of a surrogate built from products with A(θ) (Gardner et al. 2018).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from ..autograd import first_order_value
from ..kernels.stationary import RadialKernel
from ..structured.grid import Grid, interpolated_diag, kuu_matmul
from ..structured.iterative import CGResult, pcg, pivoted_cholesky
from ..structured.iterative import logdet_slq as slq


class Probes(NamedTuple):
    """Standard-normal draws for z = L ε1 + σ ε2: ε1 [rank, s], ε2 [N, s]."""

    eps1: Tensor
    eps2: Tensor


class Solution(NamedTuple):
    """What one evaluation leaves: α = A⁻¹(y − m), the log-determinant estimate, CG's run."""

    alpha: Tensor
    logdet: Tensor
    cg: CGResult


def _preconditioned(kernel: RadialKernel, grid: Grid, kuu, noise: Tensor, rank: int):
    """V ↦ K̃V and the pivoted-Cholesky preconditioner P = LLᵀ + σ²I of rank `rank`."""
    kmat = lambda V: grid.W @ kuu(grid.Wt @ V)  # noqa: E731
    diag = interpolated_diag(kernel, grid.idx, grid.weights, grid.spacing, grid.sizes)
    return kmat, pivoted_cholesky(kmat, diag, rank, noise)


def solve_targets(kernel: RadialKernel, grid: Grid, r: Tensor, noise: Tensor, rank: int,
                  tol: float, max_iterations: int) -> Tensor:
    """α = A⁻¹r by preconditioned CG alone (no probes: what a posterior needs). [N]"""
    kuu = kuu_matmul(kernel, grid.spacing, grid.sizes)
    kmat, P = _preconditioned(kernel, grid, kuu, noise, rank)
    return pcg(lambda V: kmat(V) + noise * V, r[:, None], P, tol, max_iterations).X[:, 0]


def evidence(kernel: RadialKernel, grid: Grid, r: Tensor, noise: Tensor, probes: Probes,
             rank: int, tol: float, max_iterations: int) -> tuple[Tensor, Solution]:
    """(log p(y) with the estimator's gradient, the solution) for residual targets r = y − m(X)
    (differentiable in a mean's parameters)."""
    kuu = kuu_matmul(kernel, grid.spacing, grid.sizes)
    with torch.no_grad():
        r0, sigma2 = r.detach(), noise.detach()
        kmat, P = _preconditioned(kernel, grid, kuu, sigma2, rank)
        Z = P.sample(probes.eps1, probes.eps2)
        B = torch.cat([r0[:, None], Z], 1)
        cg = pcg(lambda V: kmat(V) + sigma2 * V, B, P, tol, max_iterations)
        alpha, U = cg.X[:, 0], cg.X[:, 1:]
        PZ = P.solve(Z)
        logdet = P.logdet() + slq(cg.T[1:], cg.steps[1:], (Z * PZ).sum(0))
        value = -0.5 * (r0 @ alpha) - 0.5 * logdet - 0.5 * r0.shape[0] * math.log(2 * math.pi)
    # surrogate: its gradient is the estimator of the module docstring
    right = torch.cat([alpha[:, None], PZ], 1)
    A_right = grid.W @ kuu(grid.Wt @ right) + noise * right
    left = torch.cat([alpha[:, None], U], 1)
    s = left.shape[1] - 1
    quad = 0.5 * (left[:, 0] @ A_right[:, 0])
    trace = 0.5 * (left[:, 1:] * A_right[:, 1:]).sum() / s
    surrogate = quad - trace - alpha @ r
    # the surrogate's own derivative is not the estimate's Hessian: a second derivative raises
    gradient = first_order_value(surrogate - surrogate.detach(), "the KISS-GP evidence",
                                 "its gradient is a stochastic estimator taken through a "
                                 "surrogate (Gardner et al. 2018), whose derivative is not "
                                 "the Hessian of the estimate")
    return value + gradient, Solution(alpha, logdet, cg)
