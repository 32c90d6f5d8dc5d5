"""Iterative linear algebra for A = K̃ + σ²I known only through products A V.

* `pivoted_cholesky`: a rank-r partial pivoted Cholesky K̃ ≈ L Lᵀ (r products with A), the
  preconditioner P = L Lᵀ + σ²I (Gardner et al. 2018), applied by Woodbury's identity, with
  log|P| by the determinant lemma.
* `pcg`: preconditioned conjugate gradients for several right-hand sides at once, returning
  the tridiagonal Lanczos coefficients of each column (from the CG step sizes: Saad 2003, §6.7).
* `logdet_slq`: stochastic Lanczos quadrature with the preconditioner (Ubaru et al. 2017;
  Gardner et al. 2018): log|A| = log|P| + tr log(P⁻¹A), the trace estimated with probes
  z ~ N(0, P) as E[z̃ᵀ log(T) z̃] from each probe's CG run.
Breakdown is judged relative to the matrix's scale, never by absolute thresholds: a pivot
below `pivot_tolerance` times the largest diagonal entry is rounding noise (the residual
diagonal carries errors of about rank·ε·max diag), and a CG direction whose curvature
pᵀAp/‖p‖² is below `BREAKDOWN`·ε·‖A‖ (‖A‖ estimated from the products seen) finds A singular
to working precision: that column stops there (`CGResult.breakdown`), finite.
Shapes: A V [N, k] -> [N, k]; diag [N]; L [N, r].
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

MatMul = Callable[[Tensor], Tensor]
#: Pivots of a float64 pivoted Cholesky below this fraction of the largest diagonal entry end it.
PIVOT_FLOOR = 1e-12
#: Breakdown, relative to the scale (ε: the unit roundoff): a CG direction with curvature
#: pᵀAp ≤ BREAKDOWN·ε·‖A‖·‖p‖², a Lanczos step with β ≤ BREAKDOWN·ε·‖A‖ (`lanczos`).
BREAKDOWN = 100.0


class Preconditioner(NamedTuple):
    """P = L Lᵀ + σ²I with L [N, r]; C = chol(I_r + LᵀL/σ²)."""

    L: Tensor
    noise: Tensor
    C: Tensor

    def solve(self, R: Tensor) -> Tensor:
        """P⁻¹R = (R − L (σ²I + LᵀL)⁻¹ LᵀR)/σ² (Woodbury)."""
        inner = torch.cholesky_solve(self.L.mT @ R / self.noise, self.C)
        return (R - self.L @ inner) / self.noise

    def logdet(self) -> Tensor:
        """log|P| = N log σ² + log|I + LᵀL/σ²|."""
        return (self.L.shape[0] * torch.log(self.noise)
                + 2.0 * torch.log(torch.diagonal(self.C)).sum())

    def sample(self, eps1: Tensor, eps2: Tensor) -> Tensor:
        """z = L ε1 + σ ε2 ~ N(0, P) for ε1 [r, s], ε2 [N, s] standard normal."""
        return self.L @ eps1[: self.L.shape[1]] + torch.sqrt(self.noise) * eps2


def pivoted_cholesky(kmatmul: MatMul, diag: Tensor, rank: int, noise: Tensor) -> Preconditioner:
    """P = L Lᵀ + σ²I from a pivoted Cholesky of K̃ (columns from `kmatmul`) of rank at most
    `rank`: it stops early once the largest remaining pivot is below `pivot_tolerance`."""
    N = diag.shape[0]
    rank = min(rank, N)
    if not bool(torch.isfinite(diag).all()):
        raise ValueError("pivoted_cholesky: the kernel matrix's diagonal is not finite")
    d = diag.clone()
    L = diag.new_zeros(N, rank)
    perm_done = torch.zeros(N, dtype=torch.bool, device=diag.device)
    floor = pivot_tolerance(diag.dtype, rank) * diag.max()
    used = 0
    for j in range(rank):
        i = int(torch.argmax(torch.where(perm_done, torch.full_like(d, -1.0), d)))
        if d[i] <= floor:
            break
        e = diag.new_zeros(N, 1)
        e[i] = 1.0
        col = kmatmul(e)[:, 0] - L[:, :j] @ L[i, :j]
        if not bool(torch.isfinite(col).all()):
            raise ValueError(f"pivoted_cholesky: column {i} of the kernel matrix is not finite")
        L[:, j] = col / torch.sqrt(d[i])
        d = d - L[:, j] ** 2
        perm_done[i] = True
        used = j + 1
    L = L[:, :used]
    eye = torch.eye(used, dtype=diag.dtype, device=diag.device)
    C = torch.linalg.cholesky(eye + L.mT @ L / noise)
    return Preconditioner(L, noise, C)


def pivot_tolerance(dtype: torch.dtype, rank: int) -> float:
    """The relative pivot below which a pivoted Cholesky of rank ≤ `rank` stops: `PIVOT_FLOOR`,
    or the rounding error of the residual diagonal (rank·ε) where that is larger (float32)."""
    return max(PIVOT_FLOOR, rank * torch.finfo(dtype).eps)


class CGResult(NamedTuple):
    """Solutions X = A⁻¹B [N, k], the Lanczos tridiagonals [k, J, J] (valid up to `steps`
    per column), the iterations run, the largest final relative residual, and which columns
    stopped at a breakdown [k] (A singular to working precision along a search direction)."""

    X: Tensor
    T: Tensor
    steps: Tensor
    iterations: int
    residual: float
    breakdown: Tensor


def pcg(matmul: MatMul, B: Tensor, precond: Preconditioner | None, tol: float = 1e-6,
        max_iterations: int = 1000) -> CGResult:
    """Preconditioned CG on A X = B, all columns at once; each column stops when its
    residual ‖r‖ ≤ tol ‖b‖, or at a breakdown (its coefficients are frozen from then on)."""
    solve = precond.solve if precond is not None else (lambda R: R)
    eps = torch.finfo(B.dtype).eps
    X = torch.zeros_like(B)
    R = B.clone()
    Z = solve(R)
    P = Z.clone()
    rz = (R * Z).sum(0)
    norms = B.norm(dim=0).clamp_min(1e-300)
    active = R.norm(dim=0) > tol * norms
    broken = torch.zeros_like(active)
    scale = torch.zeros_like(rz)  # per column, the largest ‖A p‖/‖p‖ so far: ≤ ‖A‖
    alphas, betas, steps = [], [], torch.zeros(B.shape[1], dtype=torch.long, device=B.device)
    it = 0
    while bool(active.any()) and it < max_iterations:
        AP = matmul(P)
        p2 = (P * P).sum(0)
        scale = torch.maximum(scale, torch.nan_to_num(
            AP.norm(dim=0) / p2.sqrt().clamp_min(1e-300), nan=0.0, posinf=0.0))
        curvature = (P * AP).sum(0)
        curved = curvature > BREAKDOWN * eps * scale * p2  # False for NaN
        broken = broken | (active & ~curved)
        active = active & curved
        if not bool(active.any()):
            break
        alpha = torch.where(active, rz / curvature, torch.zeros_like(rz))
        X = X + alpha * P
        R = R - alpha * AP
        Z = solve(R)
        rz_new = (R * Z).sum(0)
        beta = torch.where(active, rz_new / rz, torch.zeros_like(rz))
        P = Z + beta * P
        rz = rz_new
        alphas.append(alpha)
        betas.append(beta)
        steps = steps + active.long()
        unsolved = active & (R.norm(dim=0) > tol * norms)
        definite = torch.isfinite(rz) & (rz > 0)  # rᵀP⁻¹r > 0 for r ≠ 0: P⁻¹ is definite
        broken = broken | (unsolved & ~definite)
        active = unsolved & definite
        it += 1
    return CGResult(X, _tridiagonals(alphas, betas, steps), steps, it,
                    float((R.norm(dim=0) / norms).max()), broken)


def _tridiagonals(alphas: list[Tensor], betas: list[Tensor], steps: Tensor) -> Tensor:
    """Lanczos T [k, J, J] of each column from its CG coefficients: T_jj = 1/α_j +
    β_{j−1}/α_{j−1}, T_{j,j+1} = √β_j/α_j (entries beyond a column's steps are zero)."""
    J = len(alphas)
    k = steps.shape[0]
    T = steps.new_zeros(k, J, J, dtype=alphas[0].dtype) if J else torch.zeros(k, 0, 0)
    for j in range(J):
        ok = j < steps
        a = torch.where(ok, alphas[j], torch.ones_like(alphas[j]))
        diag = 1.0 / a
        if j > 0:
            prev = torch.where(ok, alphas[j - 1], torch.ones_like(a))
            diag = diag + betas[j - 1] / prev
        T[:, j, j] = torch.where(ok, diag, torch.zeros_like(diag))
        if j + 1 < J:
            off = torch.where(j + 1 < steps, torch.sqrt(betas[j].clamp_min(0.0)) / a,
                              torch.zeros_like(a))
            T[:, j, j + 1] = T[:, j + 1, j] = off
    return T


def logdet_slq(T: Tensor, steps: Tensor, probe_norms2: Tensor) -> Tensor:
    """tr log(P⁻¹A) ≈ mean_i ‖z̃_i‖² e1ᵀ log(T_i) e1 (z̃_i = P^{−½} z_i, ‖z̃_i‖² = z_iᵀP⁻¹z_i)."""
    total = T.new_zeros(())
    for i in range(T.shape[0]):
        n = int(steps[i])
        if n == 0:
            continue
        lam, Q = torch.linalg.eigh(T[i, :n, :n])
        total = total + probe_norms2[i] * (Q[0] ** 2 * torch.log(lam)).sum()
    return total / T.shape[0]
