"""The Gamma likelihood: its density against scipy, its Gaussian expectations and Power-EP
tilted moments against adaptive quadrature, predictive moments, gradients, the shape learned
by SVGP, and Power EP with SGPC (small α against the SVGP ELBO of the same q(u))."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from scipy import stats

import sparsegp as sg
from sparsegp.likelihoods import Gamma, likelihood_from_config

from .references import (
    check_gaps_shrink_as_alpha,
    check_predictive_moments,
    expectations_gradcheck,
    quad_under_normal,
    same_q_gaps,
    tilted_reference,
)

F64 = torch.float64


def t(a):
    return torch.as_tensor(a, dtype=F64)


def gamma_logpdf(y, f, k):
    return float(stats.gamma.logpdf(y, a=k, scale=math.exp(f) / k))


def test_log_prob_matches_scipy():
    f = np.linspace(-4.0, 5.0, 10)
    y = np.array([0.01, 1.0, 3.0, 0.2, 7.0, 2.0, 50.0, 200.0, 12.0, 1e-4])
    for k in (0.3, 1.0, 2.5, 30.0, 1e3):
        lik = Gamma(shape=k)
        with torch.no_grad():
            got = lik.log_prob(t(f), t(y)).numpy()
        ref = np.array([gamma_logpdf(yk, fk, k) for fk, yk in zip(f, y)])
        assert np.all(np.abs(got - ref) <= 1e-12 * (1 + np.abs(ref))), (k, got - ref)


@pytest.mark.parametrize("k", [0.5, 2.0, 50.0])
def test_variational_expectations_match_adaptive_quadrature(k):
    lik = Gamma(shape=k)
    grid = [(mu, v, y) for mu in (-1.0, 0.5, 4.0) for v in (0.01, 0.5, 2.0) for y in (0.05, 3.0, 200.0)]
    mean, var, y = (t([g[i] for g in grid]) for i in range(3))
    with torch.no_grad():
        got = lik.variational_expectations(mean, var, y).numpy()
    for j, (mu, v, yk) in enumerate(grid):
        ref = quad_under_normal(lambda f, yk=yk: gamma_logpdf(yk, f, k), mu, v, math.log(yk))
        # exact in closed form: agreement to the reference's own rounding
        assert abs(got[j] - ref) < 1e-8 * (1 + abs(ref)), (mu, v, yk, got[j], ref)


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_tilted_moments_and_predictive_density_match_adaptive_quadrature(alpha):
    for k in (0.5, 3.0, 20.0):
        lik = Gamma(shape=k)
        # the last two: the likelihood far out in the prior's tail (log y 20 prior sds away)
        cases = [(0.0, 1.0, 0.4), (0.5, 2.0, 6.0), (-1.0, 0.05, 1.0), (1.0, 1.0, 200.0),
                 (-1.0, 0.05, 30.0), (3.0, 0.5, 0.01)]
        mean, var, y = (t([c[i] for c in cases]) for i in range(3))
        with torch.no_grad():
            log_Z, d1, d2 = lik.tilted_moments(mean, var, y, alpha)
            density = lik.predict_log_density(mean, var, y)
        for j, (mu, v, yk) in enumerate(cases):
            ref = tilted_reference(lambda f, yk=yk, k=k: gamma_logpdf(yk, f, k), mu, v, alpha,
                                   (mu, math.log(yk)))
            # 32 Gauss–Hermite points about the mode: ≤ 2e-7 measured for v ≤ 2 (worst k = ½)
            for got, want in zip((log_Z[j], d1[j], d2[j]), ref):
                assert abs(float(got) - want) < 3e-7 * (1 + abs(want)), (k, j, float(got), want)
            if alpha == 1.0:
                assert abs(float(density[j]) - ref[0]) < 3e-7 * (1 + abs(ref[0]))


def test_predictive_moments_match_quadrature():
    k = 1.5
    check_predictive_moments(Gamma(shape=k), math.exp, lambda f: math.exp(2 * f) * (1 + 1 / k),
                             rtol=1e-8)


def test_gradients_match_finite_differences():
    # in the raw shape and the mean and variance
    lik = Gamma(shape=1.7)
    mean = t([0.1, -0.8, 2.0]).requires_grad_()
    var = t([0.3, 1.1, 0.05]).requires_grad_()
    y = t([0.5, 4.0, 9.0])

    expectations_gradcheck(lik, mean, var, y)


def test_parameters_config_and_validation():
    lik = Gamma(shape=2.0)
    lik.shape = 0.3
    cfg = lik.config()
    assert cfg == {"type": "Gamma", "args": {"shape": cfg["args"]["shape"], "quadrature_points": 32}}
    back = likelihood_from_config(cfg)
    back.load_state_dict(lik.state_dict())
    assert back.shape == lik.shape
    assert not Gamma.bounded_curvature
    with pytest.raises(ValueError, match="shape"):
        Gamma(shape=0.0)
    for bad in ([1.0, 0.0, 3.0], [1.0, -2.0], [1.0, math.inf]):
        with pytest.raises(ValueError, match="positive"):
            lik.check_targets(t(bad))
    with pytest.raises(ValueError, match="positive"):
        sg.SVGP(np.zeros((3, 1)), np.array([1.0, 0.0, 2.0]), likelihood=Gamma())
    with pytest.raises(ValueError, match="positive"):
        sg.SGPC(np.zeros((3, 1)), np.array([1.0, -1.0, 2.0]), likelihood=Gamma())


def _positive_data(n, seed, k=3.0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 6.0, (n, 1))
    mu = np.exp(np.sin(X[:, 0]) + 0.5)
    return X, rng.gamma(k, mu / k)


def test_svgp_learns_the_shape():
    X, y = _positive_data(400, seed=0)
    Xt, yt = _positive_data(400, seed=1)
    model = sg.SVGP(X, y, likelihood=Gamma(shape=1.0), inducing_points=10)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a short budget; converged enough
        model.fit(epochs=300, lr=0.05)
    mean, var = model.predict_y(Xt)
    truth = np.exp(np.sin(Xt[:, 0]) + 0.5)
    # measured: k = 3.20 (truth 3); relative error of the mean 6%; held-out log density −1.27
    assert 2.3 < model.likelihood.shape < 4.0
    assert float(np.sqrt(np.mean((mean / truth - 1.0) ** 2))) < 0.1
    assert (var > 0).all()
    assert np.isfinite(model.predict_log_density(Xt, yt)).all()


def test_sgpc_small_alpha_energy_approaches_the_svgp_elbo_of_the_same_q():
    X, y = _positive_data(40, seed=3)
    Z = np.linspace(0.5, 5.5, 6)[:, None]
    assert not sg.SGPC(X, y, inducing_points=Z, likelihood=Gamma(shape=3.0)).classifies
    gaps = same_q_gaps(X, y, Z, lambda: Gamma(shape=3.0))
    # measured: gaps 4.5e-2, 4.5e-3, 4.5e-4
    check_gaps_shrink_as_alpha(gaps)


@pytest.mark.parametrize("alpha", [0.5, 1.0])
def test_sgpc_runs_power_ep_under_gamma(alpha):
    X, y = _positive_data(60, seed=2)
    model = sg.SGPC(X, y, likelihood=Gamma(shape=2.0), alpha=alpha, inducing_points=8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a short run may hit the round limit
        result = model.fit(maxiter=3, inner_maxiter=20)
    # log p is concave in f: no site precision turns negative
    assert result.info["sweeps"] > 0 and result.info["skipped_updates"] == 0
    Xt = X[:7]
    mean, var = model.predict_y(Xt)
    assert mean.shape == var.shape == (7,) and (mean > 0).all() and (var > 0).all()
    np.testing.assert_array_equal(model.predict(Xt)[0], model.predict_f(Xt)[0])  # moments of f*
    assert np.isfinite(model.predict_log_density(Xt, y[:7])).all()
    assert model.likelihood.shape != 2.0  # learned
