"""The uncollapsed variational bound (SVGP; Hensman et al. 2013, 2015; docs/math.md §4).

q(u) = N(m, S), S = L_S L_Sᵀ, for each of C latent functions sharing the kernel and the
inducing variables. In whitened coordinates (u = L v) q(f_n) is the conditional of
`conditionals.py` and the KL is to N(0, I). The ELBO is Σ_n E_q(f_n)[log p(y_n | f_n)] − KL;
on a minibatch the data term is scaled by N/|batch|, an unbiased estimate of the total.
Shapes: q_mu [M, C], q_sqrt [C, M, M] (lower triangular), means and variances [B, C].
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from .. import conditionals
from .. import covariances as cov
from ..conditionals import WhitenedGaussian
from ..kernels.base import Kernel
from ..likelihoods.base import Likelihood
from ..runtime.chunking import chunk_slices


def kl_divergence(q_mu: Tensor, q_sqrt: Tensor, L: Tensor, whiten: bool) -> Tensor:
    """Σ_c KL(q(u_c) ‖ p(u_c)) for q(u) = N(q_mu, q_sqrt q_sqrtᵀ) (of v = L⁻¹u if `whiten`)."""
    return whitened_kl(conditionals.from_parameters(L, q_mu, q_sqrt, whiten))


def whitened_kl(q: WhitenedGaussian) -> Tensor:
    """Σ_c KL(N(m, R Rᵀ) ‖ N(0, I)) = ½[‖R‖² + ‖m‖² − M C − 2 Σ log|diag R|] (R lower
    triangular; KL is invariant to the whitening u = Lv)."""
    m, R = q.mean, q.root
    M, C = m.shape
    log_det = 2.0 * torch.log(torch.abs(torch.diagonal(R, dim1=-2, dim2=-1))).sum()
    return 0.5 * ((R * R).sum() + (m * m).sum() - M * C - log_det)


def marginals(kernel: Kernel, feature: object, Xb: Tensor, L: Tensor, q: WhitenedGaussian
              ) -> tuple[Tensor, Tensor]:
    """Means and variances [B, C] of q(f) at Xb (the conditional of `conditionals.py`). With a
    `kernels.Separate` kernel latent function c has kernels[c], features[c] and L[c]
    (L [C, M, M])."""
    pairs = cov.separate_pairs(feature, kernel)
    if pairs is not None:
        columns = [marginals(k, f, Xb, L[c], q.column(c)) for c, (f, k) in enumerate(pairs)]
        return torch.cat([m for m, _ in columns], 1), torch.cat([v for _, v in columns], 1)
    A = conditionals.whiten(L, cov.Kuf(feature, kernel, Xb))
    mean, var = conditionals.conditional(A, kernel.K_diag(Xb), q)
    return mean, var.clamp_min(1e-12)  # the likelihoods' expectations need var > 0


def expected_log_likelihood(likelihood: Likelihood, mean: Tensor, var: Tensor, y: Tensor) -> Tensor:
    """Σ_n E_q(f_n)[log p(y_n | f_n)] for means/variances [B, C]; targets y [B, P] of P
    outputs (a likelihood of one latent function per output; NaN marks a missing output,
    which contributes nothing)."""
    if y.dim() == 2:
        observed = ~torch.isnan(y)
        ve = likelihood.variational_expectations(mean, var, torch.where(observed, y, 0.0))
        return torch.where(observed, ve, 0.0).sum()
    if likelihood.num_latent == 1:
        return likelihood.variational_expectations(mean[:, 0], var[:, 0], y).sum()
    return likelihood.variational_expectations(mean, var, y).sum()


def elbo(kernel: Kernel, feature: object, likelihood: Likelihood, X: Tensor, y: Tensor,
         L: Tensor, q_mu: Tensor, q_sqrt: Tensor, whiten: bool, num_data: int,
         chunk_size: int, prior_mean: Callable[[Tensor], Tensor] | None = None,
         mixing: Tensor | None = None) -> Tensor:
    """The ELBO estimate from the rows (X, y): data term × N/len(X) − KL. Shape: [].
    With a `prior_mean` m, q(f_n) has mean m(x_n) + the conditional's (m [B] shared by all
    C latents, or m [B, C] one per latent).
    With `mixing` W [P, C] the likelihood sees the P outputs W g of the C latent functions
    (LMC, `mix`); y is then [N, P]."""
    q = conditionals.from_parameters(L, q_mu, q_sqrt, whiten)
    data = L.new_zeros(())
    for sl in chunk_slices(X.shape[0], chunk_size):
        mean, var = marginals(kernel, feature, X[sl], L, q)
        mean, var = conditionals.mix_outputs(mean, mixing, var)
        if prior_mean is not None:
            mean = conditionals.with_prior_mean(mean, prior_mean(X[sl]).to(mean.dtype))
        data = data + expected_log_likelihood(likelihood, mean, var, y[sl])
    return data * (num_data / X.shape[0]) - whitened_kl(q)
