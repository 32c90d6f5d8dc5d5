"""Exact GP regression: dense reference predictions and a fit on the Snelson data."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.linalg import cho_factor, cho_solve

import sparsegp as sg

from ..conftest import make_problem


def se(A, B, ell, var):
    d = (A[:, None, :] - B[None, :, :]) / ell
    return var * np.exp(-0.5 * (d**2).sum(-1))


def test_objective_and_predictions_match_dense_formulas():
    X, y = make_problem(0, N=25)
    Xs = np.random.default_rng(1).uniform(-3, 3, (6, 2))
    ell, var, noise = np.array([0.8, 1.7]), 1.4, 0.07
    m = sg.GPR(X, y, kernel=sg.kernels.SquaredExponential(lengthscale=ell, variance=var),
               noise_variance=noise, standardize_y=False)  # the dense formulas' raw y
    C = se(X, X, ell, var) + noise * np.eye(25)
    c = cho_factor(C, lower=True)
    lml = -0.5 * y @ cho_solve(c, y) - np.log(np.diag(c[0])).sum() - 12.5 * np.log(2 * np.pi)
    assert m.log_marginal_likelihood() == pytest.approx(lml, rel=1e-12)
    Ks = se(X, Xs, ell, var)
    mean = Ks.T @ cho_solve(c, y)
    cov = se(Xs, Xs, ell, var) - Ks.T @ cho_solve(c, Ks)
    mu, v = m.predict(Xs)
    np.testing.assert_allclose(mu, mean, rtol=1e-10)
    np.testing.assert_allclose(v, np.diag(cov), rtol=1e-9)
    mu, S = m.predict(Xs, full_cov=True)
    np.testing.assert_allclose(S, cov, rtol=1e-9, atol=1e-12)
    _, vy = m.predict_y(Xs)
    np.testing.assert_allclose(vy, np.diag(cov) + noise, rtol=1e-10)


def test_fit_on_snelson_recovers_the_known_hyperparameters():
    X, y = sg.datasets.snelson()
    m = sg.GPR(X, y, standardize_y=False)  # data-based start, SE-ARD kernel; the published
    # values are those of the zero-mean GP on y as given
    res = m.fit()
    assert res.success
    # Published values for this data set (e.g. Snelson & Ghahramani 2006; Bauer et al. 2016):
    # lengthscale ≈ 0.6, signal variance ≈ 0.8, noise variance ≈ 0.08, log p(y) ≈ −55.9.
    assert 0.5 < float(m.kernel.lengthscale[0]) < 0.75
    assert 0.5 < m.kernel.variance < 1.1
    assert 0.06 < m.noise_variance < 0.1
    assert m.log_marginal_likelihood() == pytest.approx(-55.9, abs=0.1)
    # A stationary point: the gradient vanishes.
    m.training_loss().backward()
    assert max(float(p.grad.abs().max()) for p in m.parameters()) < 1e-3
