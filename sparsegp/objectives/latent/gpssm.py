"""The GP state-space model's variational bound (Frigola et al. 2014; van der Wilk 2018, §6.3).

x_0 ~ N(0, I), x_{t+1} = f(x_t) + N(0, diag q), y_t = C x_t + d + N(0, diag R), with one GP
f_j: R^Q → R per state dimension (shared kernel and inducing inputs Z). In the approximating-
process view the posterior process is q(f) = p(f | u) q(u), and the states get a q(x_{0:T−1})
independent of f and u: a Gauss–Markov chain per state dimension (Frigola et al. 2014's
Markov q(x), one chain per dimension) with marginals N(μ_t, diag S_t) and lag-one correlations
ρ_t = tanh(a_t) [T−1, Q], so that E[x_{t+1} | x_t] = μ_{t+1} + c_t(x_t − μ_t) with c_t =
ρ_t √(S_{t+1}/S_t) elementwise, and H[q(x)] = Σ_t ½ log(2πe S_t) + Σ_t ½ log(1 − ρ_t²);
ρ = 0 is the mean-field q(x) = Π_t N(μ_t, diag S_t). Then

  L = Σ_t E_q log N(y_t; C x_t + d, R) + Σ_t E_q(x_t, x_{t+1}, f) log N(x_{t+1}; f(x_t), q)
      + E_q log p(x_0) + H[q(x)] − KL(q(u) ‖ p(u)).

The transition term is the GP-LVM's data term (`gplvm.py`) with inputs q(x_t) and outputs the
next states: Ψ1ᵀY becomes Σ_t E[k_u(x_t) x_{t+1}ᵀ] = Σ_t (ψ1_t μ_{t+1}ᵀ + E[k_u(x_t)(x_t −
μ_t)ᵀ] diag c_t) (`psi.cross_moment`) and Σ y² becomes E x²_{t+1} = μ² + S. q(u) can therefore be
collapsed to its optimum (full batch) or kept explicit (minibatches of transitions).
Shapes: Y [T, P], mu, S [T, Q], C [P, Q], d [P], R [P], q [Q].
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ...kernels.base import Kernel
from .gplvm import PsiSums, psi_sums


def emission_term(Y: Tensor, mu: Tensor, S: Tensor, C: Tensor, d: Tensor, R: Tensor) -> Tensor:
    """Σ_t E_q(x_t) log N(y_t; C x_t + d, diag R) = −½ Σ_tp [log 2πR_p + ((y − Cμ − d)² +
    (C² S)_tp)/R_p] (the rows of Y and of q(x) given)."""
    r = Y - mu @ C.mT - d
    v = S @ (C * C).mT
    return -0.5 * (Y.shape[0] * torch.log(2.0 * math.pi * R).sum() + ((r * r + v) / R).sum())


def initial_term(mu0: Tensor, S0: Tensor) -> Tensor:
    """E_q(x_0) log N(x_0; 0, I)."""
    return -0.5 * (math.log(2.0 * math.pi) * mu0.shape[-1] + (mu0 * mu0 + S0).sum())


def entropy(S: Tensor) -> Tensor:
    """H[Π N(μ, diag S)] = ½ Σ log(2πe S)."""
    return 0.5 * torch.log(2.0 * math.pi * math.e * S).sum()


def coupling(a: Tensor) -> tuple[Tensor, Tensor]:
    """(ρ = tanh a, log(1 − ρ²) = −2 log cosh a) elementwise, the latter without cancellation."""
    b = a.abs()
    return torch.tanh(a), -2.0 * (b + torch.nn.functional.softplus(-2.0 * b) - math.log(2.0))


def chain_entropy(S_next: Tensor, log1m_rho2: Tensor | None = None) -> Tensor:
    """Σ_t H[q(x_{t+1} | x_t)] = Σ ½ log(2πe S_{t+1}(1 − ρ_t²)) of the given transitions
    (`log1m_rho2` log(1 − ρ_t²); None: the mean-field q(x), ρ = 0)."""
    return entropy(S_next) + (0.0 if log1m_rho2 is None else 0.5 * log1m_rho2.sum())


def transition_sums(kernel: Kernel, Z: Tensor, mu: Tensor, S: Tensor, steps: Tensor | None = None,
                    *, rho: Tensor | None = None, rule: tuple[Tensor, Tensor] | None = None,
                    chunk_size: int | None = None) -> PsiSums:
    """The Ψ sums of the transitions t → t + 1 for t in `steps` (default all, 0 … T−2):
    inputs q(x_t), outputs x_{t+1} (mean μ_{t+1}, correlation ρ_t [T−1, Q] with x_t, None for
    the mean-field q(x)), second moments Σ (μ²_{t+1} + S_{t+1})."""
    prev = torch.arange(mu.shape[0] - 1, device=mu.device) if steps is None else steps
    coef = None if rho is None else rho[prev] * torch.sqrt(S[prev + 1] / S[prev])
    sums = psi_sums(kernel, Z, mu[prev + 1], mu[prev], S[prev], rule=rule, chunk_size=chunk_size,
                    coef=coef)
    return sums._replace(yy=sums.yy + S[prev + 1].sum(0))
