"""Natural-gradient steps on a Gaussian q(u) (Salimbeni, Eleftheriadis & Hensman 2018)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from ..distributed import all_reduce_, is_distributed
from ..linalg import CholeskyError, jittered_cholesky


class NaturalGradientError(CholeskyError):
    """No step size keeps the new q(u) positive definite."""


def natural_gradient_step(objective: Callable[[Tensor, Tensor], Tensor], q_mu: nn.Parameter,
                          q_sqrt: nn.Parameter, gamma: float = 1.0) -> float:
    """One natural-gradient step of size γ on q(u) = N(q_mu, q_sqrt q_sqrtᵀ), in place.

    `objective(mean, root)` evaluates the bound at another q (shapes as q_mu [M, C] and
    q_sqrt [C, M, M]). The natural gradient in the natural parameters θ = (S⁻¹m, −½S⁻¹) is the
    ordinary gradient with respect to the expectation parameters η = (m, S + mmᵀ):
    θ ← θ + γ ∂L/∂η. For a Gaussian likelihood and all the data, γ = 1 lands on the optimal
    q(u). The step is halved until the new precision is positive definite; returns the step
    taken. Under torch.distributed the ranks' (unbiased) gradients are averaged.
    """
    m0, S_root = q_mu.detach(), q_sqrt.detach().tril()
    m = m0.mT  # [C, M]
    S = S_root @ S_root.mT
    eta1 = m.clone().requires_grad_(True)
    eta2 = (S + m[..., None] * m[..., None, :]).requires_grad_(True)
    S_eta = eta2 - eta1[..., None] * eta1[..., None, :]
    root = torch.stack([jittered_cholesky(s, 0.0, name="S")[0] for s in S_eta])
    value = objective(eta1.mT, root)
    g1, g2 = torch.autograd.grad(value, (eta1, eta2))
    if is_distributed():  # every rank's estimate is unbiased: average them
        all_reduce_([g1, g2], "the natural gradient")
        g1, g2 = g1 / torch.distributed.get_world_size(), g2 / torch.distributed.get_world_size()
    g2 = 0.5 * (g2 + g2.mT)
    L_S = torch.linalg.cholesky(S)
    theta1 = torch.cholesky_solve(m[..., None], L_S)[..., 0]  # S⁻¹m
    precision = torch.cholesky_inverse(L_S)  # S⁻¹ (q(u) is stored by its covariance)
    step = gamma
    for _ in range(30):
        new_prec = precision - 2.0 * step * g2  # −2θ₂ after the step
        L_P, info = torch.linalg.cholesky_ex(new_prec)
        if int(info.max()) == 0:
            break
        step /= 2.0
    else:
        raise NaturalGradientError("natural-gradient step: no step size down to γ·2⁻³⁰ keeps "
                                   "the covariance of q(u) positive definite")
    new_m = torch.cholesky_solve((theta1 + step * g1)[..., None], L_P)[..., 0]
    new_S = torch.cholesky_inverse(L_P)
    with torch.no_grad():
        q_mu.copy_(new_m.mT)
        q_sqrt.copy_(torch.linalg.cholesky(0.5 * (new_S + new_S.mT)))
    return step
