"""Ψ-statistics against Gauss–Hermite quadrature, plain Monte Carlo and the S → 0 limit."""

from __future__ import annotations

import pytest
import torch

import sparsegp as sg
from sparsegp.objectives.latent.psi import MC_SAMPLES, _quadrature, psi_chunk, sample_rule


def _inputs(Q: int = 2, M: int = 5, B: int = 7, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    Z = torch.randn(M, Q, generator=g, dtype=torch.float64)
    mu = torch.randn(B, Q, generator=g, dtype=torch.float64)
    S = 0.05 + 0.5 * torch.rand(B, Q, generator=g, dtype=torch.float64)
    return Z, mu, S


def _kernels():
    return [sg.kernels.SquaredExponential(lengthscale=[0.7, 1.3], variance=1.7),
            sg.kernels.SquaredExponential(lengthscale=0.9, variance=0.6),
            sg.kernels.Linear(variance=[0.5, 2.0]),
            sg.kernels.Linear(variance=0.8)]


@pytest.mark.parametrize("kernel", _kernels(), ids=["se-ard", "se", "linear-ard", "linear"])
def test_closed_forms_equal_gauss_hermite(kernel):
    # the integrands are smooth: 40 nodes per dimension integrate them to rounding
    Z, mu, S = _inputs()
    closed = psi_chunk(kernel, Z, mu, S)
    numeric = _quadrature(kernel, Z, mu, S, sample_rule(2, Z, 40))
    for a, b in zip(closed, numeric):
        assert torch.allclose(a, b, rtol=1e-11, atol=1e-12)


def _monte_carlo(kernel, Z, mu, S, n=200_000, seed=3):
    g = torch.Generator().manual_seed(seed)
    eps = torch.randn(n, *mu.shape, generator=g, dtype=torch.float64)
    X = mu + torch.sqrt(S) * eps  # [n, B, Q]
    with torch.no_grad():
        K = torch.stack([kernel.K(X[:, b], Z) for b in range(mu.shape[0])], 1)  # [n, B, M]
        psi1, psi1_se = K.mean(0), K.std(0) / n**0.5
        P = (K[..., :, None] * K[..., None, :]).sum(1)  # Σ_b k kᵀ: [n, M, M]
    return psi1, psi1_se, P.mean(0), P.std(0) / n**0.5


@pytest.mark.parametrize("kernel", [sg.kernels.SquaredExponential(lengthscale=[0.7, 1.3, 1.0]),
                                    sg.kernels.Matern32(lengthscale=0.8, variance=1.3)],
                         ids=["se-closed-form", "matern32-quadrature"])
def test_psi_statistics_equal_monte_carlo(kernel):
    # an estimate independent of both the closed forms and the Gauss–Hermite rule: every entry
    # within 5 standard errors
    Z, mu, S = _inputs(Q=3, M=4, B=3, seed=1)
    _, psi1, psi2 = psi_chunk(kernel, Z, mu, S)
    mc1, se1, mc2, se2 = _monte_carlo(kernel, Z, mu, S)
    assert ((psi1 - mc1).abs() <= 5 * se1 + 1e-12).all()
    assert ((psi2 - mc2).abs() <= 5 * se2 + 1e-12).all()


@pytest.mark.parametrize("kernel", [*_kernels(), sg.kernels.Matern52(lengthscale=[0.7, 1.3])
                                    + sg.kernels.Linear()],
                         ids=["se-ard", "se", "linear-ard", "linear", "sum-quadrature"])
def test_zero_input_variance_gives_the_kernel_matrices(kernel):
    Z, mu, _ = _inputs()
    S = torch.full_like(mu, 1e-14)
    psi0, psi1, psi2 = psi_chunk(kernel, Z, mu, S)
    with torch.no_grad():
        Kfu = kernel.K(mu, Z)
        assert torch.allclose(psi1, Kfu, rtol=1e-9, atol=1e-12)
        assert torch.allclose(psi2, Kfu.mT @ Kfu, rtol=1e-9, atol=1e-12)
        assert torch.allclose(psi0, kernel.K_diag(mu).sum(), rtol=1e-9)


def test_the_quadrature_of_a_sum_kernel_has_its_cross_terms():
    # Ψ2 of k1 + k2 is Ψ2(k1) + Ψ2(k2) + the cross expectations E[k1 k2ᵀ] + E[k2 k1ᵀ]:
    # the quadrature of the sum must differ from the sum of the closed forms by exactly those
    k1, k2 = sg.kernels.SquaredExponential(lengthscale=[0.7, 1.3]), sg.kernels.Linear()
    Z, mu, S = _inputs()
    rule = sample_rule(2, Z, 30)
    _, p1_sum, p2_sum = psi_chunk(k1 + k2, Z, mu, S, rule)
    _, p1_a, p2_a = psi_chunk(k1, Z, mu, S)
    _, p1_b, p2_b = psi_chunk(k2, Z, mu, S)
    nodes, w = rule
    X = (mu[:, None, :] + torch.sqrt(S)[:, None, :] * nodes).reshape(-1, 2)
    with torch.no_grad():
        A = k1.K(X, Z).view(mu.shape[0], -1, Z.shape[0])
        B = k2.K(X, Z).view(mu.shape[0], -1, Z.shape[0])
        cross = torch.einsum("j,bjm,bjk->mk", w, A, B)
    assert torch.allclose(p1_sum, p1_a + p1_b, rtol=1e-10)
    assert torch.allclose(p2_sum, p2_a + p2_b + cross + cross.mT, rtol=1e-9)
    assert cross.abs().max() > 0.01  # the cross terms matter here


def test_sample_rule_is_gauss_hermite_then_seeded_antithetic_monte_carlo():
    like = torch.zeros((), dtype=torch.float64)
    nodes, w = sample_rule(3, like)
    assert nodes.shape == (16**3, 3) and float(w.sum()) == pytest.approx(1.0, rel=1e-13)
    # exact for polynomials: E[x1² x2⁴] = 1·3 under N(0, I)
    assert float((w * nodes[:, 0] ** 2 * nodes[:, 1] ** 4).sum()) == pytest.approx(3.0, rel=1e-12)
    nodes, w = sample_rule(13, like)  # 2¹³ > MAX_NODES: Monte Carlo
    assert nodes.shape == (MC_SAMPLES, 13)
    assert torch.allclose(nodes.mean(0), torch.zeros(13, dtype=torch.float64), atol=1e-12)  # antithetic pairs
    assert torch.equal(nodes, sample_rule(13, like)[0])  # seeded: a deterministic objective
