"""The uncollapsed streaming variational bound (Bui, Nguyen & Turner 2017; docs/math.md §10.1)
for any likelihood: a new batch of data and the old posterior over old inducing inputs a.

The old data enter only through the old approximate posterior q_old(a) and the old prior
p_old(a) = N(0, K'_aa = L'L'ᵀ), both kept in the old whitened coordinates w = L'⁻¹a
(`OldPosterior`: q_old(w) = N(m_o, R_o R_oᵀ), p_old(w) = N(0, I)). For q(b) = N(Lm, L R Rᵀ Lᵀ)
over the new inducing inputs b (L = chol(K_bb), new hyperparameters) the bound is

  F = Σ_n E_q[log p(y_n | f_n)] − KL[q(b) ‖ p(b)] + E_q(a)[log q_old(a) − log p_old(a)]

where q(a) = ∫ p(a | b) q(b) db. In the old whitened coordinates, with G = L'⁻¹K_ab L⁻ᵀ
[M_a, M_b] and K̃ = L'⁻¹K_aa L'⁻ᵀ (the new kernel), q(w) = N(μ, Σ): μ = G m,
Σ = K̃ − G Gᵀ + G R Rᵀ Gᵀ, and the last term is a difference of two Gaussian cross-entropies
(the log 2π and log|L'| parts cancel):

  E_q(w)[log N(w; m_o, R_o R_oᵀ) − log N(w; 0, I)]
     = −log|R_o| − ½[tr(R_o⁻¹ Σ R_o⁻ᵀ) + ‖R_o⁻¹(μ − m_o)‖²] + ½[tr Σ + ‖μ‖²],

computed from triangular solves (never an inverse of a covariance). Per latent function
(they share the kernel and inducing inputs and are independent in q), summed. Cost
O(N M_b² + M_a³ + M_a² M_b): the old data are never needed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

from ... import conditionals
from ... import covariances as cov
from ...conditionals import WhitenedGaussian
from ...kernels.base import Kernel
from ...likelihoods.base import Likelihood
from ...linalg import solve_lower
from ..svgp import elbo


class OldPosterior(NamedTuple):
    """q_old over the old inducing inputs Z [M_a, D] in the old whitened coordinates: L [M_a,
    M_a] = chol(K'_aa) of the old prior (with its jitter), mean [M_a, C] and lower-triangular
    root [C, M_a, M_a] of q_old(w), w = L⁻¹f(Z) (internal units)."""

    Z: Tensor
    L: Tensor
    mean: Tensor
    root: Tensor


def old_posterior(Z: Tensor, L: Tensor, q: WhitenedGaussian) -> OldPosterior:
    """The `OldPosterior` of an SVGP's q(v) (a covariance root), detached copies."""
    if q.precision:
        raise ValueError("the streaming SVGP bound takes q_old by its covariance root (an SVGP's)")
    root = q.root if q.root.dim() == 3 else q.root.expand(q.mean.shape[1], *q.root.shape)
    with torch.no_grad():
        return OldPosterior(Z.detach().clone(), L.detach().clone(), q.mean.detach().clone(),
                            root.tril().detach().clone())


def old_data_term(kernel: Kernel, feature: object, L: Tensor, q: WhitenedGaussian,
                  old: OldPosterior) -> Tensor:
    """E_q(a)[log q_old(a) − log p_old(a)] of the module docstring, summed over the latent
    functions. L = chol(K_bb) of the new prior, q the whitened q(v) over b. Shape: []."""
    Za, Lo = old.Z.to(L), old.L.to(L)
    Kab = cov.Kuf(feature, kernel, Za).to(L.dtype).mT  # [M_a, M_b]
    G = solve_lower(Lo, solve_lower(L, Kab.mT).mT)  # L'⁻¹ K_ab L⁻ᵀ  [M_a, M_b]
    K = solve_lower(Lo, solve_lower(Lo, kernel.K(Za).to(L.dtype)).mT)  # L'⁻¹K_aa L'⁻ᵀ
    K = 0.5 * (K + K.mT)
    mu = G @ q.mean  # [M_a, C]
    RG = q.root_t_times(G.mT)  # [C, M_b, M_a]: R⁻¹Gᵀ or RᵀGᵀ, so Σ = K − GGᵀ + RGᵀRG
    R_o = old.root.to(L)
    C = mu.shape[1]
    eye = torch.eye(R_o.shape[-1], dtype=L.dtype, device=L.device).expand(C, -1, -1)
    R_inv = torch.linalg.solve_triangular(R_o, eye, upper=False)  # [C, M_a, M_a]
    residual = K.expand(C, -1, -1) - (G @ G.mT).expand(C, -1, -1)  # K̃ − GGᵀ, shared
    tr_old = ((R_inv @ residual) * R_inv).sum() + (RG @ R_inv.mT).square().sum()
    diff = (R_inv @ (mu - old.mean.to(L)).mT.unsqueeze(-1)).squeeze(-1)  # [C, M_a]
    tr_prior = C * torch.diagonal(residual[0]).sum() + RG.square().sum()
    log_det = torch.log(torch.abs(torch.diagonal(R_o, dim1=-2, dim2=-1))).sum()
    return -log_det - 0.5 * (tr_old + diff.square().sum()) + 0.5 * (tr_prior + mu.square().sum())


def streaming_elbo(kernel: Kernel, feature: object, likelihood: Likelihood, X: Tensor,
                   y: Tensor, L: Tensor, q_mu: Tensor, q_sqrt: Tensor, whiten: bool,
                   num_data: int, chunk_size: int, old: OldPosterior,
                   prior_mean: Callable[[Tensor], Tensor] | None = None) -> Tensor:
    """F of the module docstring: the SVGP ELBO estimate of the rows (X, y) of the new batch
    (`objectives.svgp.elbo`, data term × N/len(X)) plus the old data's term. Shape: []."""
    new = elbo(kernel, feature, likelihood, X, y, L, q_mu, q_sqrt, whiten, num_data,
               chunk_size, prior_mean)
    q = conditionals.from_parameters(L, q_mu, q_sqrt, whiten)
    return new + old_data_term(kernel, feature, L, q, old)
