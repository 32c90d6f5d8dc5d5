"""Ψ-statistics: kernel expectations under a diagonal Gaussian q(x) = N(μ, diag S).

For inputs that are themselves uncertain (the Bayesian GP-LVM; Titsias & Lawrence 2010),
the collapsed bound needs, per point n, with k_u(x) = k(Z, x) [M]:

  ψ0_n = E[k(x_n, x_n)],   ψ1_n = E[k_u(x_n)] [M],   ψ2_n = E[k_u(x_n) k_u(x_n)ᵀ] [M, M].

Closed forms exist for the squared exponential (ARD) and the linear kernel; any other kernel
(sums, products, Matérn, ...) is integrated numerically: a tensor-product Gauss–Hermite rule
in the Q latent dimensions while it has at most `MAX_NODES` nodes, otherwise a fixed set of
antithetic Monte Carlo samples (seeded, so the objective stays a deterministic function of
the parameters). `psi_chunk` returns the sums over a chunk of points.

Where an output is correlated with the point's own input (the next state of a GPSSM with a
Markov q(x): E[y_nq | x_n] = ν_nq + c_nq (x_nq − μ_nq)), Ψ1ᵀY needs the cross moments
E[k_u(x_n)(x_nq − μ_nq)] = S_nq ∂ψ1_n/∂μ_nq (Stein's lemma), weighted by c: `cross_moment`.
Shapes: Z [M, Q], mu [B, Q], S [B, Q] -> ψ0 [], ψ1 [B, M], Σ_n ψ2_n [M, M].
"""

from __future__ import annotations

import itertools
import math

import torch
from torch import Tensor

from ...kernels.base import Kernel
from ...kernels.linear import Linear
from ...kernels.stationary import SquaredExponential
from ...quadrature import nodes_and_weights

#: Largest tensor-product Gauss–Hermite rule used for kernels without closed forms.
MAX_NODES = 4096
#: Monte Carlo samples (half of them antithetic) beyond that.
MC_SAMPLES = 1024


def _se(kernel: SquaredExponential, Z: Tensor, mu: Tensor, S: Tensor
        ) -> tuple[Tensor, Tensor, Tensor]:
    """Closed forms for σ² exp(−½ Σ_q (x_q − x'_q)²/ℓ_q²) (Titsias & Lawrence 2010, eqs. 15–16):
    ψ1 = σ² Π_q (1 + S_q/ℓ_q²)^−½ exp(−½ Σ_q (μ_q − z_q)²/(ℓ_q² + S_q)) and
    ψ2[m, m'] = σ⁴ Π_q (1 + 2S_q/ℓ_q²)^−½ exp(−Σ_q (z_mq − z_m'q)²/(4ℓ_q²)
                                              − Σ_q (μ_q − z̄_q)²/(ℓ_q² + 2S_q)), z̄ = (z_m + z_m')/2."""
    ell2 = kernel.value("lengthscale").expand(Z.shape[1]) ** 2
    var = kernel.value("variance")
    centre = Z.detach().mean(0)  # distances are translation invariant: limits cancellation
    Z, mu = Z - centre, mu - centre
    a = ell2 + S  # [B, Q]
    log_c1 = -0.5 * torch.log1p(S / ell2).sum(-1)  # [B]
    d1 = ((mu[:, None, :] - Z[None]) ** 2 / a[:, None, :]).sum(-1)  # [B, M]
    psi1 = var * torch.exp(log_c1[:, None] - 0.5 * d1)
    b = ell2 + 2.0 * S
    log_c2 = -0.5 * torch.log1p(2.0 * S / ell2).sum(-1)
    M = Z.shape[0]
    zbar = (0.5 * (Z[:, None, :] + Z[None, :, :])).reshape(M * M, -1)  # [M², Q]
    # Σ_q (μ_q − z̄_q)²/b_q expanded into two products over q: [B, M²]
    quad = ((mu * mu / b).sum(-1, keepdim=True) - 2.0 * (mu / b) @ zbar.mT
            + (1.0 / b) @ (zbar * zbar).mT)
    pair = (((Z[:, None, :] - Z[None, :, :]) ** 2) / (4.0 * ell2)).sum(-1)  # [M, M]
    psi2 = var * var * torch.exp(-pair) * torch.exp(log_c2[:, None] - quad).sum(0).view(M, M)
    return var * mu.shape[0], psi1, psi2


def _linear(kernel: Linear, Z: Tensor, mu: Tensor, S: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Closed forms for Σ_q v_q x_q x'_q: ψ0 = Σ_q v_q (μ_q² + S_q), ψ1 = Z V μ and
    Σ_n ψ2_n = (Z V)(Σ_n μ_n μ_nᵀ + diag Σ_n S_n)(Z V)ᵀ."""
    v = kernel.value("variance").expand(Z.shape[1])
    ZV = Z * v
    psi0 = (v * (mu * mu + S)).sum()
    second = mu.mT @ mu + torch.diag(S.sum(0))
    return psi0, mu @ ZV.mT, ZV @ second @ ZV.mT


def max_points(Q: int) -> int:
    """The most Gauss–Hermite points per dimension whose Q-dimensional product rule keeps
    at most MAX_NODES nodes."""
    return int(math.floor(MAX_NODES ** (1.0 / Q) + 1e-9))


def sample_rule(Q: int, like: Tensor, points: int | None = None) -> tuple[Tensor, Tensor]:
    """Standard-normal nodes [J, Q] and weights [J] (summing to 1) for E over N(0, I_Q):
    the tensor-product Gauss–Hermite rule with `points` per dimension (default: the most
    that keeps J ≤ MAX_NODES, at most 20), or MC_SAMPLES seeded antithetic Monte Carlo
    samples when even 2 per dimension would exceed MAX_NODES."""
    if points is None:
        points = min(20, max_points(Q))
    if points >= 2 and points**Q <= MAX_NODES:
        z, w = nodes_and_weights(points, like)
        nodes = torch.stack([torch.stack(c) for c in itertools.product(z, repeat=Q)])
        weights = torch.stack([torch.prod(torch.stack(c)) for c in itertools.product(w, repeat=Q)])
        return nodes, weights
    g = torch.Generator().manual_seed(0)
    half = torch.randn(MC_SAMPLES // 2, Q, generator=g, dtype=torch.float64)
    nodes = torch.cat([half, -half]).to(like)
    return nodes, torch.full((nodes.shape[0],), 1.0 / nodes.shape[0], dtype=like.dtype,
                             device=like.device)


def _quadrature(kernel: Kernel, Z: Tensor, mu: Tensor, S: Tensor, rule: tuple[Tensor, Tensor]
                ) -> tuple[Tensor, Tensor, Tensor]:
    """Any kernel: x_nj = μ_n + √S_n ξ_j, ψ's as weighted sums over the nodes ξ_j."""
    nodes, w = rule
    B, Q = mu.shape
    X = (mu[:, None, :] + torch.sqrt(S)[:, None, :] * nodes).reshape(-1, Q)  # [B·J, Q]
    Kxz = kernel.K(X, Z).view(B, -1, Z.shape[0])  # [B, J, M]
    psi0 = (kernel.K_diag(X).view(B, -1) @ w).sum()
    psi1 = (Kxz * w[:, None]).sum(1)
    R = (Kxz * torch.sqrt(w)[:, None]).reshape(-1, Z.shape[0])
    return psi0, psi1, R.mT @ R


def psi_chunk(kernel: Kernel, Z: Tensor, mu: Tensor, S: Tensor,
              rule: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """(Σ_n ψ0_n [], ψ1 [B, M], Σ_n ψ2_n [M, M]) for one chunk of points: closed form for the
    squared exponential and the linear kernel, the quadrature `rule` (`sample_rule`) for any
    other kernel. Differentiable in the kernel's parameters, Z, mu and S."""
    if type(kernel) is SquaredExponential:
        return _se(kernel, Z, mu, S)
    if type(kernel) is Linear:
        return _linear(kernel, Z, mu, S)
    return _quadrature(kernel, Z, mu, S, rule if rule is not None else sample_rule(Z.shape[1], Z))


def cross_moment(kernel: Kernel, Z: Tensor, mu: Tensor, S: Tensor, coef: Tensor, psi1: Tensor,
                 rule: tuple[Tensor, Tensor] | None = None) -> Tensor:
    """Σ_n c_nq E[k(z_m, x_n)(x_nq − μ_nq)] [M, Q] for coefficients `coef` c [B, Q] and the
    chunk's ψ1 [B, M] (`psi_chunk`'s): for the squared exponential ψ1_nm S_nq (z_mq − μ_nq)/
    (ℓ_q² + S_nq), for the linear kernel v_q z_mq S_nq, and by the quadrature `rule` (the nodes
    ξ_j: Σ_j w_j k(z_m, μ_n + √S_n ξ_j) √S_nq ξ_jq) for any other kernel."""
    if type(kernel) is SquaredExponential:
        ell2 = kernel.value("lengthscale").expand(Z.shape[1]) ** 2
        w = coef * S / (ell2 + S)  # [B, Q]
        centre = Z.detach().mean(0)  # z − μ is translation invariant: limits cancellation
        return (Z - centre) * (psi1.mT @ w) - psi1.mT @ ((mu - centre) * w)
    if type(kernel) is Linear:
        v = kernel.value("variance").expand(Z.shape[1])
        return Z * v * (coef * S).sum(0)
    nodes, wts = rule if rule is not None else sample_rule(Z.shape[1], Z)
    B, Q = mu.shape
    root = torch.sqrt(S)
    X = (mu[:, None, :] + root[:, None, :] * nodes).reshape(-1, Q)
    Kxz = kernel.K(X, Z).view(B, -1, Z.shape[0])  # [B, J, M]
    return torch.einsum("bjm,j,jq,bq->mq", Kxz, wts, nodes, root * coef)


def has_closed_form(kernel: Kernel) -> bool:
    """Whether `psi_chunk` integrates this kernel exactly (else by quadrature)."""
    return type(kernel) in (SquaredExponential, Linear)
