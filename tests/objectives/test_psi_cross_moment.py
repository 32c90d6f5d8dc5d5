"""The cross moments Σ_n c_nq E[k(z_m, x_n)(x_nq − μ_nq)] of the Markov GPSSM bound
(`psi.cross_moment`): Stein's lemma S ∂ψ1/∂μ by autograd for the closed forms, and an
independent tensor-product Gauss–Hermite evaluation for every kernel."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

import sparsegp as sg
from sparsegp.objectives.latent.gplvm import psi_sums
from sparsegp.objectives.latent.psi import cross_moment, psi_chunk

F64 = torch.float64
KERNELS = [sg.kernels.SquaredExponential(lengthscale=[0.8, 1.4], variance=1.3),
           sg.kernels.Linear(variance=[0.6, 1.1]),
           sg.kernels.Matern52(lengthscale=1.2, variance=0.9)]
IDS = ["se", "linear", "matern52-quadrature"]


def _problem(B=7, Q=2, M=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    mu = torch.randn(B, Q, generator=g, dtype=F64)
    S = 0.05 + 0.4 * torch.rand(B, Q, generator=g, dtype=F64)
    Z = torch.randn(M, Q, generator=g, dtype=F64)
    coef = torch.randn(B, Q, generator=g, dtype=F64)
    return mu, S, Z, coef


def _hermite(kernel, Z, mu, S, coef, points=60):
    """Σ_n c_nq E[k(z_m, x_n)(x_nq − μ_nq)] by numpy's probabilists' Gauss–Hermite rule."""
    xi, w = np.polynomial.hermite_e.hermegauss(points)
    grid = np.array(list(itertools.product(xi, repeat=Z.shape[1])))  # [J, Q]
    weight = np.prod(np.array(list(itertools.product(w / w.sum(), repeat=Z.shape[1]))), 1)
    out = np.zeros(tuple(Z.shape))
    for n in range(mu.shape[0]):
        root = np.sqrt(S[n].numpy())
        k = kernel.K(torch.as_tensor(mu[n].numpy() + root * grid), Z).detach().numpy()  # [J, M]
        out += (k * weight[:, None]).T @ (grid * root * coef[n].numpy())
    return out


@pytest.mark.parametrize("kernel", KERNELS[:2], ids=IDS[:2])
def test_closed_forms_are_steins_lemma(kernel):
    # E[k(z, x)(x_q − μ_q)] = S_q ∂ψ1/∂μ_q for x ~ N(μ, diag S)
    mu, S, Z, coef = _problem()
    mu = mu.clone().requires_grad_(True)
    psi1 = psi_chunk(kernel, Z, mu, S)[1]  # [B, M]
    stein = torch.stack([torch.autograd.grad(psi1[:, m].sum(), mu, retain_graph=True)[0]
                         for m in range(Z.shape[0])], 1)  # [B, M, Q]
    expected = torch.einsum("bmq,bq->mq", stein, S * coef)
    got = cross_moment(kernel, Z, mu.detach(), S, coef, psi1.detach())
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kernel", KERNELS, ids=IDS)
def test_cross_moments_equal_gauss_hermite(kernel):
    mu, S, Z, coef = _problem()
    psi1 = psi_chunk(kernel, Z, mu, S)[1]
    got = cross_moment(kernel, Z, mu, S, coef, psi1).detach().numpy()
    # the closed forms to rounding; the Matérn (not smooth at the inducing inputs) through the
    # library's own 20-point rule against 60 points here (measured 2e-6 of 0.1)
    tol = 1e-10 if type(kernel) is not sg.kernels.Matern52 else 1e-4
    np.testing.assert_allclose(got, _hermite(kernel, Z, mu, S, coef), rtol=tol, atol=tol)


@pytest.mark.parametrize("kernel", KERNELS, ids=IDS)
def test_psi_sums_with_coefficients_stream_and_differentiate(kernel):
    # chunked sums equal one chunk, and the chunked gradients (the sums recompute each
    # chunk) equal autograd through one direct evaluation, for the coefficients too
    mu, S, Z, coef = _problem(B=9)
    Y = torch.randn(9, 2, generator=torch.Generator().manual_seed(4), dtype=F64)
    leaves = [t.clone().requires_grad_(True) for t in (mu, S, Y, coef)]
    sums = psi_sums(kernel, Z, leaves[2], leaves[0], leaves[1], coef=leaves[3], chunk_size=4)
    w = torch.randn(Z.shape[0], 2, generator=torch.Generator().manual_seed(5), dtype=F64)
    streamed = torch.autograd.grad((sums.psi1_y * w).sum() + sums.psi2.sum() + sums.psi0,
                                   leaves)
    direct_leaves = [t.clone().requires_grad_(True) for t in (mu, S, Y, coef)]
    m_, S_, Y_, c_ = direct_leaves
    psi0, psi1, psi2 = psi_chunk(kernel, Z, m_, S_)
    psi1_y = psi1.mT @ Y_ + cross_moment(kernel, Z, m_, S_, c_, psi1)
    torch.testing.assert_close(sums.psi1_y, psi1_y.detach(), rtol=1e-12, atol=1e-12)
    direct = torch.autograd.grad((psi1_y * w).sum() + psi2.sum() + psi0, direct_leaves)
    for a, b in zip(streamed, direct):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_coefficients_of_the_wrong_shape_are_named():
    mu, S, Z, coef = _problem()
    with pytest.raises(ValueError, match=r"coef must have the shape of mu \(7, 2\)"):
        psi_sums(sg.kernels.SquaredExponential(), Z, torch.zeros(7, 2, dtype=F64), mu, S,
                 coef=coef[:, :1])
