"""SGPC against dense references: full EP on the N×N prior (`tests/likelihoods/dense_ep.py`:
Rasmussen & Williams 2006, Alg. 3.5, with adaptive quadrature of the tilted moments), and the
SVGP ELBO as α → 0."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm

import sparsegp as sg

from ..likelihoods import dense_ep as reference
from ..likelihoods.references import check_gaps_shrink_as_alpha, small_alpha_gaps


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
    dense = reference.dense_ep(K, [reference.bernoulli((v + 1) / 2) for v in y])
    tau, nu, log_z = dense.tau, dense.nu, dense.log_z
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
    gaps = small_alpha_gaps(
        lambda alpha: sg.SGPC(X, y, kernel=sg.kernels.SquaredExponential(lengthscale=0.8, variance=2.0),
                              inducing_points=Z, alpha=alpha),
        lambda: sg.SVGP(X, (y + 1) / 2, kernel=sg.kernels.SquaredExponential(lengthscale=0.8, variance=2.0),
                        likelihood=sg.likelihoods.Bernoulli(), inducing_points=Z, whiten=False))
    check_gaps_shrink_as_alpha(gaps)
