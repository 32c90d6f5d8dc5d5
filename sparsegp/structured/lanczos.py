"""Lanczos tridiagonalisation of a symmetric positive-definite A known only through products,
and the factor of T⁻¹ that LOVE's predictive variances need (Pleiss et al. 2018).

k steps from a start vector b give Q [N, k] with orthonormal columns and the tridiagonal
T = QᵀAQ [k, k]. Floating point makes both tests below relative to the matrix's scale,
‖A‖ estimated as the largest ‖A q_j‖ seen (a lower bound of ‖A‖, and ‖T‖ ≤ √3 max_j ‖A q_j‖):

* breakdown: once the Krylov space is exhausted (A has few distinct eigenvalues, or its
  spectrum falls below the rounding level, as an interpolated kernel's does), the next
  direction is rounding noise of size about ε‖A‖, however small |α_j| is. The run stops when
  β_j ≤ `BREAKDOWN`·ε·‖A‖ and returns the shorter basis: span(Q) is then an invariant
  subspace of A to rounding.
* orthogonality: every new direction is orthogonalised against all of Q, and a second time
  where the first pass left less than 1/√2 of its norm (classical Gram–Schmidt, "twice is
  enough": Daniel, Gragg, Kaufman & Stewart 1976); a second pass that shrinks it as much
  again finds the direction inside span(Q) to working precision: a breakdown too.

Measured on KISS-GP's A = W K_UU Wᵀ + σ²I after fitting smooth data (σ² ≈ 1e-5‖A‖): a stop
test β_j ≤ 10⁻¹²|α_j| with one pass ran past the breakdown to 200 steps, lost orthogonality
(‖QᵀQ − I‖ = 1) and gave T eigenvalues of ±1e63 (N = 300) or variances 93% low (N = 20,000);
the stop at 100ε‖A‖ ends at rank 11–104 with ‖QᵀQ − I‖ ≤ 1e-14 and variances within 1e-7
(relative) of a CG solve to 1e-13, the second pass never needed; with the stop disabled, the
second pass alone (on 183 of 200 steps) kept ‖QᵀQ − I‖ at 1e-15.
Shapes: b [N]; Q [N, k]; T [k, k]; the factor R [k, k].
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple, NoReturn

import torch
from torch import Tensor

from .iterative import BREAKDOWN  # a step breaks down when β_j ≤ BREAKDOWN·ε·‖A‖

#: Daniel–Gragg–Kaufman–Stewart: a pass that leaves less than this fraction of a vector's
#: norm is repeated; a repeated pass that does so shows the vector was noise inside span(Q).
KEEP = 1.0 / math.sqrt(2.0)


class LanczosResult(NamedTuple):
    """Q [N, k] (orthonormal), T [k, k], `norm` (the largest ‖A q_j‖, a lower estimate of ‖A‖
    with ‖T‖ ≤ √3·norm) and whether the run stopped at a breakdown before `steps`."""

    Q: Tensor
    T: Tensor
    norm: float
    breakdown: bool


def lanczos(matmul: Callable[[Tensor], Tensor], b: Tensor, steps: int,
            tolerance: float = BREAKDOWN) -> LanczosResult:
    """At most `steps` Lanczos steps on A from b: A ≈ Q T Qᵀ on the Krylov space (exact when
    the space is exhausted, the rank k then below `steps`). A step breaks down when its β is
    at most `tolerance`·ε·‖A‖ (0: only where re-orthogonalisation finds the new direction
    inside span(Q))."""
    N = b.shape[0]
    start_norm = float(b.norm())
    if not math.isfinite(start_norm) or start_norm == 0.0:
        raise ValueError(f"lanczos needs a finite, nonzero start vector; its norm is {start_norm}")
    eps = torch.finfo(b.dtype).eps
    k = min(steps, N)
    Q = b.new_zeros(N, k)
    alphas: list[Tensor] = []
    betas: list[Tensor] = []
    q = b / start_norm
    beta, q_prev = b.new_zeros(()), torch.zeros_like(b)
    norm, broke = 0.0, False
    for j in range(k):
        Q[:, j] = q
        w = matmul(q[:, None])[:, 0]
        w_norm = float(w.norm())
        if not math.isfinite(w_norm):
            raise ValueError(f"lanczos: the product A q at step {j} is not finite")
        norm = max(norm, w_norm)
        w = w - beta * q_prev
        a = q @ w
        alphas.append(a)
        if j + 1 == k:
            break
        w = w - a * q
        before = float(w.norm())
        basis = Q[:, : j + 1]
        w = w - basis @ (basis.mT @ w)
        beta = w.norm()
        if float(beta) < KEEP * before:  # cancellation: rounding left parts of span(Q) in w
            w = w - basis @ (basis.mT @ w)
            first, beta = float(beta), w.norm()
            if float(beta) < KEEP * first:  # w was rounding noise inside span(Q)
                k, broke = j + 1, True
                break
        if float(beta) <= tolerance * eps * norm:
            k, broke = j + 1, True
            break
        betas.append(beta)
        q_prev, q = q, w / beta
    T = torch.diag(torch.stack(alphas))
    if betas:
        off = torch.stack(betas)
        T = T + torch.diag(off, 1) + torch.diag(off, -1)
    return LanczosResult(Q[:, :k], T, norm, broke)


def inverse_root(result: LanczosResult, lower: Tensor | float) -> Tensor:
    """R [k, k] with R Rᵀ = T⁻¹ (T = V Λ Vᵀ, R = V Λ^{-½}) for A ⪰ `lower`·I > 0 (KISS-GP:
    A = K̃ + σ²I ⪰ σ²I). T = QᵀAQ has its eigenvalues in [lower, √3·norm]; those within
    √ε·norm of that interval (rounding) are moved into it. T beyond it means the Krylov basis
    lost orthogonality: a ValueError says so and how to avoid it, never a failed factorisation."""
    T = result.T
    floor = float(lower)
    upper = math.sqrt(3.0) * result.norm
    slack = math.sqrt(torch.finfo(T.dtype).eps) * result.norm
    if not floor > 0.0:
        raise ValueError(f"inverse_root needs a positive lower bound on A's eigenvalues; got {floor}")
    size = float(T.abs().max()) if T.numel() else 0.0
    if not size <= upper + slack:  # NaN too; |T_ij| ≤ ‖T‖: eigh only on a bounded T
        _unbuildable(T.shape[0], f"entries up to {size:.3g}", floor, upper)
    lam, V = torch.linalg.eigh(T)
    low, high = float(lam.min()), float(lam.max())
    if low < floor - slack or high > upper + slack:
        _unbuildable(T.shape[0], f"eigenvalues in [{low:.3g}, {high:.3g}]", floor, upper)
    return V / torch.sqrt(lam.clamp(min=floor, max=upper))


def _unbuildable(k: int, found: str, floor: float, upper: float) -> NoReturn:
    raise ValueError(
        f"the predictive variances (LOVE) cannot be built: the Lanczos tridiagonal T of "
        f"A = K̃ + σ²I ({k} steps) has {found}, beyond A's bounds [σ² = {floor:.3g}, √3·‖A‖ ≈ "
        f"{upper:.3g}] by more than rounding (its Krylov basis lost orthogonality); use a "
        "smaller lanczos_rank, a larger noise variance (or a prior keeping it away from zero), "
        "or a longer lengthscale / coarser grid, which make A better conditioned")
