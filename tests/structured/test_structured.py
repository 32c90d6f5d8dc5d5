"""Grids, interpolation, Kronecker–Toeplitz products and the iterative solvers against dense
linear algebra."""

from __future__ import annotations

import math

import pytest
import torch

import sparsegp as sg
from sparsegp.structured.grid import interpolate, interpolated_diag, kuu_matmul
from sparsegp.structured.interpolation import grid_bounds, grid_points
from sparsegp.structured.iterative import logdet_slq, pcg, pivoted_cholesky
from sparsegp.structured.kronecker import dense_kuu, first_columns

F64 = torch.float64


def _inputs(N, D, seed=0):
    return 3.0 * torch.rand(N, D, generator=torch.Generator().manual_seed(seed), dtype=F64)


@pytest.mark.parametrize("D", [1, 2, 3])
def test_cubic_interpolation_is_exact_for_quadratics(D):
    X = _inputs(25, D)
    sizes = [12, 10, 9][:D]
    start, spacing = grid_bounds(X, sizes)
    g = interpolate(X, start, spacing, sizes)
    U = torch.cartesian_prod(*grid_points(start, spacing, sizes)).reshape(-1, D)
    f = lambda Z: (Z**2).sum(1) - 0.7 * Z[:, 0] * Z[:, -1] + Z[:, 0] - 2.0  # noqa: E731
    assert torch.allclose(g.W @ f(U), f(X), atol=1e-12)
    assert torch.allclose(g.weights.sum(-1), torch.ones(25, D, dtype=F64), atol=1e-14)
    assert g.W._nnz() <= 25 * 4**D


@pytest.mark.parametrize("D", [1, 2, 3])
def test_kronecker_toeplitz_products_equal_the_dense_kernel_matrix(D):
    kernel = sg.kernels.SquaredExponential(lengthscale=[0.7, 1.3, 0.9][:D], variance=1.4)
    sizes = [9, 7, 6][:D]
    spacing = torch.tensor([0.3, 0.5, 0.4][:D], dtype=F64)
    U = torch.cartesian_prod(*grid_points(torch.zeros(D, dtype=F64), spacing, sizes)).reshape(-1, D)
    with torch.no_grad():
        K = kernel.K(U)  # the SE-ARD kernel is the product over dimensions
        dense = dense_kuu(first_columns(kernel, spacing, sizes), kernel.value("variance"))
        assert torch.allclose(dense, K, atol=1e-13)
        V = torch.randn(K.shape[0], 3, generator=torch.Generator().manual_seed(1), dtype=F64)
        assert torch.allclose(kuu_matmul(kernel, spacing, sizes)(V), K @ V, atol=1e-12)


def test_interpolated_diagonal_equals_the_dense_one():
    X = _inputs(30, 2)
    kernel = sg.kernels.Matern32(lengthscale=[0.8, 1.1], variance=0.9)
    sizes = [15, 14]
    start, spacing = grid_bounds(X, sizes)
    g = interpolate(X, start, spacing, sizes)
    with torch.no_grad():
        W = g.W.to_dense()
        dense = torch.diagonal(W @ kuu_matmul(kernel, spacing, sizes)(W.T))
        assert torch.allclose(interpolated_diag(kernel, g.idx, g.weights, spacing, sizes), dense,
                              atol=1e-13)


def _spd(N=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = 3 * torch.rand(N, 1, generator=g, dtype=F64)
    K = sg.kernels.SquaredExponential(lengthscale=0.5).K(X).detach()
    return K, torch.tensor(0.05, dtype=F64)


def test_pivoted_cholesky_preconditioner_against_dense_algebra():
    K, noise = _spd()
    for rank in (5, 40):
        P = pivoted_cholesky(lambda V: K @ V, torch.diagonal(K), rank, noise)
        Pd = P.L @ P.L.mT + noise * torch.eye(40, dtype=F64)
        R = torch.randn(40, 3, generator=torch.Generator().manual_seed(2), dtype=F64)
        assert torch.allclose(P.solve(R), torch.linalg.solve(Pd, R), atol=1e-9)
        assert float(P.logdet()) == pytest.approx(float(torch.logdet(Pd)), rel=1e-12)
    # full rank reproduces K (to the pivots' stopping tolerance)
    assert torch.allclose(P.L @ P.L.mT, K, atol=1e-8)


def test_pcg_solves_and_its_lanczos_quadrature_is_exact_after_n_steps():
    K, noise = _spd(N=25)
    A = K + noise * torch.eye(25, dtype=F64)
    P = pivoted_cholesky(lambda V: K @ V, torch.diagonal(K), 3, noise)
    Z = torch.randn(25, 4, generator=torch.Generator().manual_seed(3), dtype=F64)
    res = pcg(lambda V: A @ V, Z, P, tol=1e-13, max_iterations=200)
    assert torch.allclose(res.X, torch.linalg.solve(A, Z), atol=1e-9)
    # per probe: ‖z̃‖² e1ᵀ log(T) e1 = z̃ᵀ log(P^−½ A P^−½) z̃, z̃ = P^−½ z (exact once the
    # Krylov space is complete), so the SLQ mean equals the quadratic forms' mean
    Pd = P.L @ P.L.mT + noise * torch.eye(25, dtype=F64)
    lam, Q = torch.linalg.eigh(Pd)
    inv_root = Q @ torch.diag(lam**-0.5) @ Q.mT
    lam2, Q2 = torch.linalg.eigh(inv_root @ A @ inv_root)
    log_m = Q2 @ torch.diag(torch.log(lam2)) @ Q2.mT
    zt = inv_root @ Z
    forms = (zt * (log_m @ zt)).sum(0)
    est = logdet_slq(res.T, res.steps, (zt * zt).sum(0))
    assert float(est) == pytest.approx(float(forms.mean()), rel=1e-6)


def test_slq_estimates_the_log_determinant_within_its_standard_error():
    K, noise = _spd(N=60, seed=4)
    A = K + noise * torch.eye(60, dtype=F64)
    P = pivoted_cholesky(lambda V: K @ V, torch.diagonal(K), 4, noise)
    g = torch.Generator().manual_seed(5)
    s = 400
    Z = P.sample(torch.randn(4, s, generator=g, dtype=F64), torch.randn(60, s, generator=g,
                                                                       dtype=F64))
    res = pcg(lambda V: A @ V, Z, P, tol=1e-10, max_iterations=500)
    norms = (Z * P.solve(Z)).sum(0)
    per_probe = torch.stack([logdet_slq(res.T[i:i + 1], res.steps[i:i + 1], norms[i:i + 1])
                             for i in range(s)])
    estimate = float(P.logdet() + per_probe.mean())
    se = float(per_probe.std()) / math.sqrt(s)
    assert abs(estimate - float(torch.logdet(A))) < 4 * se + 1e-8
