"""The Beta likelihood: its density against scipy, its Gaussian expectations and Power-EP
tilted moments against adaptive quadrature (logit and probit links), predictive moments,
gradients, the precision learned by SVGP, and Power EP with SGPC (small α against the SVGP
ELBO of the same q(u); skipped site updates where log p is not concave)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from scipy import special

import sparsegp as sg
from sparsegp.likelihoods import Beta, likelihood_from_config

from .references import (
    check_gaps_shrink_as_alpha,
    check_predictive_moments,
    expectations_gradcheck,
    quad_under_normal,
    same_q_gaps,
    tilted_reference,
)

F64 = torch.float64
#: ±15 sds in the quadrature references (N(0, 1) mass beyond: 7e-51): further out,
#: scipy's Beta parameters μφ underflow
WIDTH = 15.0


def t(a):
    return torch.as_tensor(a, dtype=F64)


def mean_of(f, link):
    return float(special.expit(f)) if link == "logit" else float(special.ndtr(f))


def beta_logpdf(y, f, phi, link):
    # scipy's special functions written out (stats.beta.logpdf is the same formula at 20× the
    # cost per call; the quadrature references call this ~10⁵ times)
    mu = mean_of(f, link)
    nu = float(special.expit(-f)) if link == "logit" else float(special.ndtr(-f))
    a, b = mu * phi, nu * phi
    return float((a - 1.0) * math.log(y) + (b - 1.0) * math.log1p(-y) - special.betaln(a, b))


@pytest.mark.parametrize("link", ["logit", "probit"])
def test_log_prob_matches_scipy(link):
    f = np.linspace(-5.0, 5.0, 11)
    y = np.array([0.01, 0.5, 0.3, 0.999, 0.7, 0.2, 1e-4, 0.9, 0.45, 0.05, 0.6])
    for phi in (0.3, 1.0, 5.0, 80.0, 2e3):
        lik = Beta(precision=phi, link=link)
        with torch.no_grad():
            got = lik.log_prob(t(f), t(y)).numpy()
        ref = np.array([beta_logpdf(yk, fk, phi, link) for fk, yk in zip(f, y)])
        assert np.all(np.abs(got - ref) <= 1e-11 * (1 + np.abs(ref))), (phi, got - ref)


@pytest.mark.parametrize("link", ["logit", "probit"])
@pytest.mark.parametrize("phi", [0.5, 5.0, 200.0])
def test_variational_expectations_match_adaptive_quadrature(link, phi):
    lik = Beta(precision=phi, link=link)
    grid = [(mu, v, y) for mu in (-3.0, 0.0, 2.0) for v in (0.01, 0.5, 4.0) for y in (0.01, 0.3, 0.99)]
    mean, var, y = (t([g[i] for g in grid]) for i in range(3))
    with torch.no_grad():
        got = lik.variational_expectations(mean, var, y).numpy()
    for j, (mu, v, yk) in enumerate(grid):
        ref = quad_under_normal(lambda f, yk=yk, phi=phi: beta_logpdf(yk, f, phi, link), mu, v, mu, WIDTH)
        # 100 Gauss–Hermite points, measured: ≤ 1e-10 (logit); probit ≤ 1e-7 relative (5e-6
        # on the value −57.9 at φ = 200, m = −3, v = 4, y = 0.01)
        assert abs(got[j] - ref) < 1e-6 * (1 + abs(ref)), (mu, v, yk, got[j], ref)


@pytest.mark.parametrize("link", ["logit", "probit"])
@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_tilted_moments_and_predictive_density_match_adaptive_quadrature(link, alpha):
    # α = 1 over the precisions; α = ½ (the same code with a tempered likelihood) at two
    for phi in ((0.5, 50.0, 500.0) if alpha == 1.0 else (5.0, 500.0)):
        lik = Beta(precision=phi, link=link)
        # not a sharp prior (v = 0.01) under φ = 500, where the tilted distribution can have two
        # modes (class docstring)
        cases = [(mu, v, y) for mu in (-3.0, 0.0, 2.0) for v in (0.01, 0.5, 4.0) for y in (0.01, 0.3, 0.99)
                 if phi < 500.0 or v > 0.01]
        mean, var, y = (t([c[i] for c in cases]) for i in range(3))
        with torch.no_grad():
            log_Z, d1, d2 = lik.tilted_moments(mean, var, y, alpha)
            density = lik.predict_log_density(mean, var, y)
        for j, (mu, v, yk) in enumerate(cases):
            # every mode lies between μ and the likelihood's peak, inside ±30 in f
            ref = tilted_reference(lambda f, yk=yk, phi=phi: beta_logpdf(yk, f, phi, link), mu, v, alpha,
                                   (mu, 30.0 if yk > 0.5 else -30.0), WIDTH)
            # measured: ≤ 2e-7 (relative to 1 + |value|), worst in the second derivative
            for got, want in zip((log_Z[j], d1[j], d2[j]), ref):
                assert abs(float(got) - want) < 1e-6 * (1 + abs(want)), (phi, j, float(got), want)
            if alpha == 1.0:
                assert abs(float(density[j]) - ref[0]) < 1e-6 * (1 + abs(ref[0]))


def test_predictive_moments_match_quadrature():
    phi = 4.0
    check_predictive_moments(
        Beta(precision=phi), special.expit,
        lambda f: special.expit(f) * special.expit(-f) / (1 + phi) + special.expit(f) ** 2,
        rtol=0.0, atol=1e-12, width=WIDTH)


@pytest.mark.parametrize("link", ["logit", "probit"])
def test_gradients_match_finite_differences(link):
    # in the raw precision and the mean and variance
    lik = Beta(precision=3.7, link=link)
    mean = t([0.1, -0.8, 1.5]).requires_grad_()
    var = t([0.3, 1.1, 0.05]).requires_grad_()
    y = t([0.5, 0.04, 0.93])

    expectations_gradcheck(lik, mean, var, y)


def test_parameters_config_and_validation():
    lik = Beta(precision=2.0, link="probit")
    lik.precision = 30.0
    cfg = lik.config()
    assert cfg == {"type": "Beta", "args": {"precision": cfg["args"]["precision"], "link": "probit",
                                            "quadrature_points": 100}}
    back = likelihood_from_config(cfg)
    back.load_state_dict(lik.state_dict())
    assert back.precision == lik.precision and back.link == "probit"
    assert not Beta.bounded_curvature
    with pytest.raises(ValueError, match="precision"):
        Beta(precision=-1.0)
    with pytest.raises(ValueError, match="link"):
        Beta(link="cloglog")
    for bad in ([0.5, 0.0], [0.5, 1.0], [1.2], [math.nan]):
        with pytest.raises(ValueError, match="strictly between 0 and 1"):
            lik.check_targets(t(bad))
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        sg.SVGP(np.zeros((3, 1)), np.array([0.2, 1.0, 0.5]), likelihood=Beta())
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        sg.SGPC(np.zeros((3, 1)), np.array([0.2, 0.0, 0.5]), likelihood=Beta())


def _proportions(n, seed, phi=20.0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 6.0, (n, 1))
    mu = special.expit(1.5 * np.sin(X[:, 0]))
    return X, rng.beta(mu * phi, (1 - mu) * phi)


def test_svgp_learns_the_precision():
    X, y = _proportions(400, seed=0)
    Xt, yt = _proportions(400, seed=1)
    model = sg.SVGP(X, y, likelihood=Beta(precision=1.0), inducing_points=10)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a short budget; converged enough
        model.fit(epochs=300, lr=0.1)
    mean, var = model.predict_y(Xt)
    truth = special.expit(1.5 * np.sin(Xt[:, 0]))
    # measured: φ = 16.8 (truth 20; 19.6 after 1000 epochs at lr 0.05); RMSE of the mean 0.021
    assert 14.0 < model.likelihood.precision < 28.0
    assert float(np.sqrt(np.mean((mean - truth) ** 2))) < 0.03
    assert ((var > 0) & (var < 0.25)).all()
    assert np.isfinite(model.predict_log_density(Xt, yt)).all()


def test_sgpc_small_alpha_energy_approaches_the_svgp_elbo_of_the_same_q():
    X, y = _proportions(40, seed=3)
    Z = np.linspace(0.5, 5.5, 6)[:, None]
    gaps = same_q_gaps(X, y, Z, lambda: Beta(precision=20.0))
    # measured: gaps 7.7e-2, 7.9e-3, 7.9e-4
    check_gaps_shrink_as_alpha(gaps)


def test_sgpc_skips_and_counts_site_updates_of_negative_precision():
    # a point whose mean the prior holds far from its target, under a large precision: log p
    # is convex there (curvature up to 0.65φ), and its site's precision would turn negative
    X = np.linspace(0.0, 0.01, 11)[:, None]
    y = np.array([0.02] * 10 + [0.98])  # the last one is an outlier
    model = sg.SGPC(X, y, kernel=sg.kernels.SquaredExponential(lengthscale=1.0, variance=4.0),
                    likelihood=Beta(precision=500.0), alpha=1.0, inducing_points=X[:3])
    info = model.update_sites(max_sweeps=50, tol=1e-10)
    assert info["skipped_updates"] > 0
    assert bool((model.tau >= 0).all())
    mean, var = model.predict_y(X)
    assert np.isfinite(mean).all() and ((mean > 0) & (mean < 1)).all()


@pytest.mark.parametrize("alpha", [0.5, 1.0])
def test_sgpc_runs_power_ep_under_beta(alpha):
    X, y = _proportions(60, seed=2)
    model = sg.SGPC(X, y, likelihood=Beta(precision=10.0), alpha=alpha, inducing_points=8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a short run may hit the round limit
        result = model.fit(maxiter=3, inner_maxiter=20)
    assert result.info["sweeps"] > 0
    Xt = X[:7]
    mean, var = model.predict_y(Xt)
    assert mean.shape == var.shape == (7,) and ((mean > 0) & (mean < 1)).all() and (var > 0).all()
    np.testing.assert_array_equal(model.predict(Xt)[0], model.predict_f(Xt)[0])  # moments of f*
    assert np.isfinite(model.predict_log_density(Xt, y[:7])).all()
    assert model.likelihood.precision != 10.0  # learned
