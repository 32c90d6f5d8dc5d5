"""SGPC against dense references: full EP (Rasmussen & Williams 2006, Alg. 3.5 and eq. 3.65)
in numpy, and the SVGP ELBO as α → 0."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.linalg import cho_factor, cho_solve
from scipy.stats import norm

import sparsegp as sg


def dense_ep(K: np.ndarray, y: np.ndarray, sweeps: int = 200):
    """Sequential EP for probit GP classification (R&W Alg. 3.5), labels ±1.

    Returns the site precisions τ̃, natural means ν̃ and log Z_EP (R&W eq. 3.65).
    """
    N = len(y)
    nu, tau = np.zeros(N), np.zeros(N)
    Sigma, mu = K.copy(), np.zeros(N)
    for _ in range(sweeps):
        old = tau.copy()
        for i in range(N):
            tau_c = 1.0 / Sigma[i, i] - tau[i]
            nu_c = mu[i] / Sigma[i, i] - nu[i]
            s2c, muc = 1.0 / tau_c, nu_c / tau_c
            z = y[i] * muc / np.sqrt(1.0 + s2c)
            r = np.exp(norm.logpdf(z) - norm.logcdf(z))
            mu_hat = muc + y[i] * s2c * r / np.sqrt(1.0 + s2c)
            s2_hat = s2c - s2c**2 * r * (z + r) / (1.0 + s2c)
            d_tau = 1.0 / s2_hat - tau_c - tau[i]
            tau[i] += d_tau
            nu[i] = mu_hat / s2_hat - nu_c
            si = Sigma[:, i].copy()
            Sigma -= d_tau / (1.0 + d_tau * si[i]) * np.outer(si, si)
            mu = Sigma @ nu
        S = np.sqrt(tau)
        Lb = np.linalg.cholesky(np.eye(N) + np.outer(S, S) * K)
        V = np.linalg.solve(Lb, S[:, None] * K)
        Sigma, mu = K - V.T @ V, (K - V.T @ V) @ nu
        if np.max(np.abs(tau - old)) < 1e-12:
            break
    tau_c = 1.0 / np.diag(Sigma) - tau
    mu_c = (mu / np.diag(Sigma) - nu) / tau_c
    # log Z_EP = log N(μ̃ | 0, K + S̃⁻¹) + Σ_i [log Ẑ_i + ½ log 2π + ½ log(σ²_-i + 1/τ̃_i)
    #            + (μ_-i − μ̃_i)² / (2(σ²_-i + 1/τ̃_i))]  (R&W eq. 3.65 rearranged)
    mu_t = nu / tau
    cf = cho_factor(K + np.diag(1.0 / tau))
    log_n = (-0.5 * mu_t @ cho_solve(cf, mu_t) - np.log(np.diag(cf[0])).sum()
             - 0.5 * N * np.log(2 * np.pi))
    w = 1.0 / tau_c + 1.0 / tau
    local = (norm.logcdf(y * mu_c / np.sqrt(1.0 + 1.0 / tau_c)) + 0.5 * np.log(2 * np.pi)
             + 0.5 * np.log(w) + (mu_c - mu_t) ** 2 / (2 * w))
    return tau, nu, log_n + local.sum()


def problem(N=25, seed=1):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, (N, 1))
    y = np.where(np.sin(2 * X[:, 0]) + 0.4 * rng.normal(size=N) > 0, 1.0, -1.0)
    return X, y


@pytest.mark.parametrize("seed", [1, 2])
def test_alpha_one_with_z_equal_x_is_full_ep(seed):
    X, y = problem(seed=seed)
    ell, var = 0.8, 2.0
    K = var * np.exp(-0.5 * (X - X.T) ** 2 / ell**2)
    tau, nu, log_z = dense_ep(K, y)
    clf = sg.SGPC(X, y, kernel=sg.kernels.SquaredExponential(lengthscale=ell, variance=var),
                  inducing_points=X, alpha=1.0, jitter=1e-10)
    clf.update_sites(max_sweeps=2000, tol=1e-14)
    np.testing.assert_allclose(clf.tau.numpy(), tau, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(clf.nu.numpy(), nu, rtol=1e-6, atol=1e-8)
    assert clf.log_marginal_likelihood() == pytest.approx(log_z, abs=1e-7)
    # predictive probabilities of full EP: Φ(m*/√(1 + v*)) from the dense posterior
    Xs = np.linspace(-3, 3, 7)[:, None]
    Ks = var * np.exp(-0.5 * (X - Xs.T) ** 2 / ell**2)
    S = np.sqrt(tau)
    B = np.eye(len(y)) + np.outer(S, S) * K
    z = S * np.linalg.solve(B, S * (K @ nu))
    m = Ks.T @ (nu - z)
    v = var - np.sum(Ks * (S[:, None] * np.linalg.solve(B, S[:, None] * Ks)), 0)
    np.testing.assert_allclose(clf.predict_proba(Xs), norm.cdf(m / np.sqrt(1 + v)), rtol=1e-6)


def test_small_alpha_energy_approaches_the_svgp_elbo_of_the_same_q():
    X, y = problem(N=40, seed=3)
    Z = np.linspace(-2.5, 2.5, 6)[:, None]
    gaps = []
    for alpha in (1e-1, 1e-2, 1e-3):
        kernel = sg.kernels.SquaredExponential(lengthscale=0.8, variance=2.0)
        clf = sg.SGPC(X, y, kernel=kernel, inducing_points=Z, alpha=alpha)
        clf.update_sites(max_sweeps=3000, tol=1e-13)
        post = clf.posterior()
        sv = sg.SVGP(X, (y + 1) / 2, kernel=sg.kernels.SquaredExponential(lengthscale=0.8, variance=2.0),
                     likelihood=sg.likelihoods.Bernoulli(), inducing_points=Z, whiten=False)
        with torch.no_grad():
            sv.q_mu.copy_(post.q_mu)  # q(u) in u-space, [M, C] and [C, M, M], on every posterior
            sv.q_sqrt.copy_(torch.linalg.cholesky(post.q_cov))
        gaps.append(clf.log_marginal_likelihood() - sv.log_marginal_likelihood())
    assert abs(gaps[-1]) < 0.02
    assert abs(gaps[0]) > abs(gaps[1]) > abs(gaps[2])
    assert abs(gaps[1] / gaps[2]) == pytest.approx(10.0, rel=0.3)  # O(α)
