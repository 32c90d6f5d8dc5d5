"""Natural-gradient steps on a Gaussian q(u) (Salimbeni, Eleftheriadis & Hensman 2018)."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor, nn

from ..distributed import all_reduce_, is_distributed
from ..linalg import CholeskyError, jittered_cholesky


class NaturalGradientError(CholeskyError):
    """No step size keeps the new q(u) positive definite."""


class ExpectationParameters(NamedTuple):
    """η = (m, S + mmᵀ) of q(u) as leaves that require grad, and the (mean [M, C], root
    [C, M, M]) of q that they give, to evaluate the bound at."""

    eta1: Tensor  # [C, M]
    eta2: Tensor  # [C, M, M]
    mean: Tensor
    root: Tensor


def expectation_parameters(q_mu: nn.Parameter, q_sqrt: nn.Parameter) -> ExpectationParameters:
    """η of q(u) = N(q_mu, q_sqrt q_sqrtᵀ) (shapes q_mu [M, C], q_sqrt [C, M, M]); the bound
    evaluated at (mean, root) differentiates to ∂L/∂η, the natural gradient."""
    m, S_root = q_mu.detach().mT, q_sqrt.detach().tril()
    eta1 = m.clone().requires_grad_(True)
    eta2 = (S_root @ S_root.mT + m[..., None] * m[..., None, :]).requires_grad_(True)
    S_eta = eta2 - eta1[..., None] * eta1[..., None, :]
    root, info = torch.linalg.cholesky_ex(S_eta)  # = q_sqrt's lower triangle, differentiably
    if int(info.max()) != 0:
        root = torch.stack([jittered_cholesky(s, 0.0, name="S")[0] for s in S_eta])
    return ExpectationParameters(eta1, eta2, eta1.mT, root)


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
    eta = expectation_parameters(q_mu, q_sqrt)
    g1, g2 = averaged_over_ranks(
        list(torch.autograd.grad(objective(eta.mean, eta.root), (eta.eta1, eta.eta2))),
        "the natural gradient")
    return natural_update(q_mu, q_sqrt, g1, g2, gamma)


def averaged_over_ranks(grads: list[Tensor], what: str) -> list[Tensor]:
    """Gradients averaged over the torch.distributed ranks (every rank's minibatch estimate is
    unbiased); unchanged in one process."""
    if not is_distributed():
        return grads
    all_reduce_(grads, what)
    return [g / torch.distributed.get_world_size() for g in grads]


def natural_update(q_mu: nn.Parameter, q_sqrt: nn.Parameter, g1: Tensor, g2: Tensor,
                   gamma: float) -> float:
    """θ ← θ + γ (g1, g2) for the gradients (g1, g2) of the bound in η (see
    `natural_gradient_step`), halving γ until the new precision is positive definite."""
    m, S_root = q_mu.detach().mT, q_sqrt.detach().tril()
    g2 = 0.5 * (g2 + g2.mT)
    S = S_root @ S_root.mT
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
