"""Iterative linear algebra for A = K̃ + σ²I known only through products A V.

* `pivoted_cholesky`: a rank-r partial pivoted Cholesky K̃ ≈ L Lᵀ (r products with A), the
  preconditioner P = L Lᵀ + σ²I (Gardner et al. 2018), applied by Woodbury's identity, with
  log|P| by the determinant lemma.
* `pcg`: preconditioned conjugate gradients for several right-hand sides at once, returning
  the tridiagonal Lanczos coefficients of each column (from the CG step sizes: Saad 2003, §6.7).
* `logdet_slq`: stochastic Lanczos quadrature with the preconditioner (Ubaru et al. 2017;
  Gardner et al. 2018): log|A| = log|P| + tr log(P⁻¹A), the trace estimated with probes
  z ~ N(0, P) as E[z̃ᵀ log(T) z̃] from each probe's CG run.
Shapes: A V [N, k] -> [N, k]; diag [N]; L [N, r].
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

MatMul = Callable[[Tensor], Tensor]


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
    """P = L Lᵀ + σ²I from a rank-`rank` pivoted Cholesky of K̃ (columns from `kmatmul`)."""
    N = diag.shape[0]
    rank = min(rank, N)
    d = diag.clone()
    L = diag.new_zeros(N, rank)
    perm_done = torch.zeros(N, dtype=torch.bool, device=diag.device)
    used = 0
    for j in range(rank):
        i = int(torch.argmax(torch.where(perm_done, torch.full_like(d, -1.0), d)))
        if d[i] <= 1e-12 * diag.max():
            break
        e = diag.new_zeros(N, 1)
        e[i] = 1.0
        col = kmatmul(e)[:, 0] - L[:, :j] @ L[i, :j]
        L[:, j] = col / torch.sqrt(d[i])
        d = d - L[:, j] ** 2
        perm_done[i] = True
        used = j + 1
    L = L[:, :used]
    eye = torch.eye(used, dtype=diag.dtype, device=diag.device)
    C = torch.linalg.cholesky(eye + L.mT @ L / noise)
    return Preconditioner(L, noise, C)


class CGResult(NamedTuple):
    """Solutions X = A⁻¹B [N, k], the Lanczos tridiagonals [k, J, J] (valid up to `steps`
    per column), the iterations run, and the largest final relative residual."""

    X: Tensor
    T: Tensor
    steps: Tensor
    iterations: int
    residual: float


def pcg(matmul: MatMul, B: Tensor, precond: Preconditioner | None, tol: float = 1e-6,
        max_iterations: int = 1000) -> CGResult:
    """Preconditioned CG on A X = B, all columns at once; each column stops when its
    residual ‖r‖ ≤ tol ‖b‖ (its coefficients are frozen from then on)."""
    solve = precond.solve if precond is not None else (lambda R: R)
    X = torch.zeros_like(B)
    R = B.clone()
    Z = solve(R)
    P = Z.clone()
    rz = (R * Z).sum(0)
    norms = B.norm(dim=0).clamp_min(1e-300)
    active = R.norm(dim=0) > tol * norms
    alphas, betas, steps = [], [], torch.zeros(B.shape[1], dtype=torch.long, device=B.device)
    it = 0
    while bool(active.any()) and it < max_iterations:
        AP = matmul(P)
        alpha = torch.where(active, rz / (P * AP).sum(0), torch.zeros_like(rz))
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
        active = active & (R.norm(dim=0) > tol * norms)
        it += 1
    return CGResult(X, _tridiagonals(alphas, betas, steps), steps, it,
                    float((R.norm(dim=0) / norms).max()))


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


def lanczos(matmul, b: Tensor, steps: int) -> tuple[Tensor, Tensor]:
    """Q [N, k] (orthonormal, fully re-orthogonalised) and T [k, k] of k Lanczos steps on A
    from b: A ≈ Q T Qᵀ on the Krylov space (exact when k = N)."""
    N = b.shape[0]
    k = min(steps, N)
    Q = b.new_zeros(N, k)
    alphas, betas = [], []
    q = b / b.norm()
    beta, q_prev = b.new_zeros(()), torch.zeros_like(b)
    for j in range(k):
        Q[:, j] = q
        w = matmul(q[:, None])[:, 0] - beta * q_prev
        a = q @ w
        w = w - a * q
        w = w - Q[:, : j + 1] @ (Q[:, : j + 1].mT @ w)  # full re-orthogonalisation
        alphas.append(a)
        beta = w.norm()
        if j + 1 < k:
            if beta <= 1e-12 * abs(float(a)):
                Q, k = Q[:, : j + 1], j + 1
                break
            betas.append(beta)
            q_prev, q = q, w / beta
    T = torch.diag(torch.stack(alphas[:k]))
    if k > 1:
        off = torch.stack(betas[: k - 1])
        T = T + torch.diag(off, 1) + torch.diag(off, -1)
    return Q, T
