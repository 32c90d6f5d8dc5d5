"""The uncollapsed variational bound (SVGP; Hensman et al. 2013, 2015; MATH.md §4).

q(u) = N(m, S), S = L_S L_Sᵀ, for each of C latent functions sharing the kernel and the
inducing inputs. Whitened (u = L v, q(v) = N(m, S)): q(f_n) = N(a_nᵀm, k_nn − ‖a_n‖² + ‖L_Sᵀa_n‖²)
with a_n = L⁻¹k_n, and the KL is to N(0, I). The ELBO is Σ_n E_q(f_n)[log p(y_n | f_n)] − KL;
on a minibatch the data term is scaled by N/|batch|, an unbiased estimate of the total.
Shapes: q_mu [M, C], q_sqrt [C, M, M] (lower triangular), means and variances [B, C].
"""

from __future__ import annotations

import torch
from torch import Tensor

from .. import covariances as cov
from ..kernels.base import Kernel
from ..likelihoods.base import Likelihood
from ..linalg import log_det_from_cholesky, solve_lower
from .streaming import chunk_slices


def whitened_q(L: Tensor, q_mu: Tensor, q_sqrt: Tensor, whiten: bool) -> tuple[Tensor, Tensor]:
    """q(u) in whitened coordinates: (L⁻¹m, L⁻¹L_S) unless already whitened."""
    q_sqrt = q_sqrt.tril()
    if whiten:
        return q_mu, q_sqrt
    return solve_lower(L, q_mu), torch.linalg.solve_triangular(L, q_sqrt, upper=False)


def kl_divergence(q_mu: Tensor, q_sqrt: Tensor, L: Tensor, whiten: bool) -> Tensor:
    """Σ_c KL(q(u_c) ‖ p(u_c)): ½[tr(S̃) + ‖m̃‖² − M − log|S̃|] in whitened coordinates
    (S̃ = L⁻¹SL⁻ᵀ, so log|S̃| = log|S| − log|Kuu|)."""
    m, R = whitened_q(L, q_mu, q_sqrt, whiten)
    M, C = q_mu.shape
    log_det = 2.0 * torch.log(torch.abs(torch.diagonal(q_sqrt, dim1=-2, dim2=-1))).sum()
    if not whiten:
        log_det = log_det - C * log_det_from_cholesky(L)
    return 0.5 * ((R * R).sum() + (m * m).sum() - M * C - log_det)


def marginals(kernel: Kernel, feature: object, Xb: Tensor, L: Tensor, m: Tensor, R: Tensor
              ) -> tuple[Tensor, Tensor]:
    """Means and variances [B, C] of q(f) at Xb from whitened q(v) = N(m, R Rᵀ)."""
    A = solve_lower(L, cov.Kuf(feature, kernel, Xb))  # [M, B]
    mean = A.mT @ m
    RA = R.mT @ A  # [C, M, B]
    var = (kernel.K_diag(Xb) - (A * A).sum(0))[:, None] + (RA * RA).sum(1).mT
    return mean, var.clamp_min(1e-12)


def expected_log_likelihood(likelihood: Likelihood, mean: Tensor, var: Tensor, y: Tensor) -> Tensor:
    """Σ_n E_q(f_n)[log p(y_n | f_n)] for means/variances [B, C]."""
    if likelihood.num_latent == 1:
        return likelihood.variational_expectations(mean[:, 0], var[:, 0], y).sum()
    return likelihood.variational_expectations(mean, var, y).sum()


def elbo(kernel: Kernel, feature: object, likelihood: Likelihood, X: Tensor, y: Tensor,
         L: Tensor, q_mu: Tensor, q_sqrt: Tensor, whiten: bool, num_data: int,
         chunk_size: int) -> Tensor:
    """The ELBO estimate from the rows (X, y): data term × N/len(X) − KL. Shape: []."""
    m, R = whitened_q(L, q_mu, q_sqrt, whiten)
    data = L.new_zeros(())
    for sl in chunk_slices(X.shape[0], chunk_size):
        mean, var = marginals(kernel, feature, X[sl], L, m, R)
        data = data + expected_log_likelihood(likelihood, mean, var, y[sl])
    return data * (num_data / X.shape[0]) - kl_divergence(q_mu, q_sqrt, L, whiten)
