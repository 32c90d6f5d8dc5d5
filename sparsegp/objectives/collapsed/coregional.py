"""The collapsed bound of the linear model of coregionalisation (LMC) with a shared kernel.

P outputs y_np = Σ_l W_pl g_l(x_n) + ε_np of L independent latent GPs g_l ~ GP(0, k) with
inducing variables u_l = g_l(Z) each, ε ~ N(0, σ²). In whitened coordinates v = (I_L ⊗ L⁻¹)u
the observation (n, p) sees v through φ_np = W_p ⊗ a_n (W_p the p-th row of W, a_n = L⁻¹k_n),
so the VFE statistics of the LM inducing variables are Kronecker products of the single-output
ones (docs/math.md §2 with the vector vec(Y) as the data):

  A = σ⁻² Σ_n (W_Oᵀ W_O) ⊗ a_n a_nᵀ,  c = σ⁻² Σ_n (W_Oᵀ y_nO) ⊗ a_n,  Σ y²/σ²,
  trace term Σ_n ‖W_O‖²_F d_n/σ²,

with O = O(n) the outputs observed at x_n. Rows are grouped by their set of observed outputs,
and each group's Σ a aᵀ, Σ a y_Oᵀ, Σ y² and Σ d come from one pass of the single-output sums
(`statistics.WhitenedSums` with |O| target columns): the cost is that of one output plus an
O((LM)³) factorisation. Only the collapsed bound (VFE) and DTC have this form: FITC and Power
EP weight each (n, p) by its own λ_np.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ... import covariances as cov
from ...conditionals import WhitenedGaussian, from_precision
from .members import (
    VFE,
    CollapsedProblem,
    Statistics,
    family_objective,
    solve,
    statistics,
    upper_bound_from_statistics,
)


def row_groups(y: Tensor) -> list[tuple[Tensor, Tensor]]:
    """(rows, observed output columns) for each set of outputs observed together (y [N, P],
    NaN for missing); rows with nothing observed are left out."""
    observed = ~torch.isnan(y)
    patterns, inverse = torch.unique(observed, dim=0, return_inverse=True)
    groups = []
    for g in range(patterns.shape[0]):
        cols = torch.nonzero(patterns[g]).flatten()
        if cols.numel():
            groups.append((torch.nonzero(inverse == g).flatten(), cols))
    return groups


def lmc_statistics(p: CollapsedProblem, W: Tensor, L: Tensor) -> Statistics:
    """The statistics of module docstring for the problem's data (y [N, P]) and W [P, L]."""
    return _lmc_sums(p, W, L)[0]


def _lmc_sums(p: CollapsedProblem, W: Tensor, L: Tensor) -> tuple[Statistics, Tensor]:
    """The statistics and Σ d_n over the rows with an observation."""
    if p.fam.mode not in ("vfe", "dtc"):
        raise ValueError("the linear model of coregionalisation has a collapsed bound for "
                         f"approximation='vfe' (and 'dtc'); got {p.fam.name!r} (use SVGP)")
    M, Lat = L.shape[0], W.shape[1]
    W = W.to(L.dtype)
    A = L.new_zeros(Lat * M, Lat * M)
    c = L.new_zeros(M, Lat)
    s_y, s_d, d_rows, n = L.new_zeros(()), L.new_zeros(()), L.new_zeros(()), 0
    for rows, cols in row_groups(p.y):
        part = statistics(p._replace(X=p.X[rows], y=p.y[rows][:, cols], fam=p.fam), L)
        Wo = W[cols]
        sigma_Q = part.A  # σ⁻² Σ a aᵀ of the group
        A = A + torch.kron(Wo.mT @ Wo, sigma_Q)
        c = c + part.c @ Wo  # [M, L]: σ⁻² Σ_n a_n (W_Oᵀ y_nO)ᵀ
        s_y = s_y + part.s_y
        s_d = s_d + (Wo * Wo).sum() * part.s_d
        d_rows = d_rows + part.s_d
        n += part.n * cols.numel()
    stats = Statistics(A=A, c=c.mT.reshape(-1), s_y=s_y, s_loglam=n * torch.log(p.noise), s_d=s_d,
                       s_pen=s_d / p.noise if p.fam.mode == "vfe" else torch.zeros_like(s_d), n=n)
    return stats, d_rows


def lmc_objective(p: CollapsedProblem, W: Tensor) -> Tensor:
    """The LMC's collapsed bound (VFE) or DTC objective on vec(Y). Shape: []."""
    L, _ = cov.Kuu_cholesky(p.feature, p.kernel, p.jitter)
    stats = lmc_statistics(p, W, L)
    return family_objective(stats, solve(stats))


def lmc_posterior_q(p: CollapsedProblem, W: Tensor) -> tuple[Tensor, WhitenedGaussian, float]:
    """L = chol(Kuu), the optimal whitened q(v) of the LM inducing variables (mean [LM, 1],
    block l holding latent function l; precision root B = I + A), and the jitter used."""
    L, used = cov.Kuu_cholesky(p.feature, p.kernel, p.jitter)
    s = solve(lmc_statistics(p, W, L))
    return L, from_precision(s.L_B, s.e), used


def lmc_upper_bound(p: CollapsedProblem, W: Tensor) -> Tensor:
    """Titsias' (2014) upper bound on log p(vec Y) for the LMC. The residual covariance of the
    observed entries is a principal submatrix of (WWᵀ) ⊗ (K − Q) over the rows with an
    observation, so its largest eigenvalue is at most t = ‖W‖₂² Σ_n d_n."""
    L, _ = cov.Kuu_cholesky(p.feature, p.kernel, p.jitter)
    stats, d_rows = _lmc_sums(p._replace(fam=VFE), W, L)
    t = torch.linalg.matrix_norm(W.to(L.dtype), 2) ** 2 * d_rows.clamp_min(0.0)
    return upper_bound_from_statistics(stats, p, L, t)

