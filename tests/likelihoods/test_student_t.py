"""The Student-t likelihood: its density against scipy, its Gaussian expectations and Power-EP
tilted moments against adaptive quadrature, gradients against finite differences, the
Gaussian limit, robust regression with SVGP and Power EP with SGPC."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from scipy import integrate, stats

import sparsegp as sg
from sparsegp.likelihoods import Gaussian, StudentT, likelihood_from_config
from sparsegp.likelihoods.student_t import DF_FLOOR

F64 = torch.float64


def t(a):
    return torch.as_tensor(a, dtype=F64)


def quad_under_normal(fn, mu, v, y):
    """∫ fn(f) N(f; μ, v) df by adaptive quadrature, split at the likelihood's peak y."""
    sd = math.sqrt(v)
    lo, hi = mu - 40 * sd, mu + 40 * sd
    points = [y] if lo < y < hi else None
    value, _ = integrate.quad(lambda f: fn(f) * stats.norm.pdf(f, mu, sd), lo, hi,
                              points=points, limit=500, epsabs=1e-13, epsrel=1e-13)
    return value


def test_log_prob_matches_scipy():
    f = np.linspace(-4.0, 4.0, 9)
    y = np.array([0.3, -2.0, 1.0, 15.0, -0.5, 0.0, 4.0, 2.0, -60.0])
    # at ν = 1e4 scipy's difference of log Γs is itself 2e-12 off (against mpmath); this
    # likelihood's asymptotic series is exact to rounding there
    for df, tol in ((0.5, 1e-12), (1.5, 1e-12), (3.0, 1e-12), (30.0, 1e-12), (300.0, 1e-12),
                    (1e4, 5e-12)):
        for scale in (0.1, 1.0, 2.5):
            lik = StudentT(df=df, scale=scale)
            with torch.no_grad():
                got = lik.log_prob(t(f), t(y)).numpy()
            ref = stats.t.logpdf(y, df=df, loc=f, scale=scale)
            # 1e-12 beyond the rounding of values up to 1e4 in size
            assert np.all(np.abs(got - ref) <= tol + 1e-15 * np.abs(ref)), (df, scale, got - ref)


@pytest.mark.parametrize("df", [1.5, 3.0, 30.0])
def test_variational_expectations_match_adaptive_quadrature(df):
    scale = 0.4
    lik = StudentT(df=df, scale=scale)
    grid = [(mu, v, y) for mu in (-1.0, 0.5) for v in (0.01, 0.5, 4.0) for y in (0.0, 1.2, 25.0)]
    mean, var, y = (t([g[i] for g in grid]) for i in range(3))
    with torch.no_grad():
        got = lik.variational_expectations(mean, var, y).numpy()
    for k, (mu, v, yk) in enumerate(grid):
        ref = quad_under_normal(lambda f, yk=yk: stats.t.logpdf(yk, df=df, loc=f, scale=scale),
                                mu, v, yk)
        assert abs(got[k] - ref) < 1e-6, (mu, v, yk, got[k], ref)


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_tilted_moments_and_predictive_density_match_adaptive_quadrature(alpha):
    for df, scale in ((1.5, 0.3), (4.0, 1.0)):
        lik = StudentT(df=df, scale=scale)
        cases = [(0.0, 1.0, 0.4), (0.5, 2.0, 6.0), (-1.0, 0.05, 1.0)]
        mean, var, y = (t([c[i] for c in cases]) for i in range(3))
        with torch.no_grad():
            log_Z, d1, d2 = lik.tilted_moments(mean, var, y, alpha)
            density = lik.predict_log_density(mean, var, y)
        for k, (mu, v, yk) in enumerate(cases):
            def p(f, yk=yk, df=df, scale=scale):
                return math.exp(alpha * stats.t.logpdf(yk, df=df, loc=f, scale=scale))
            Z = quad_under_normal(p, mu, v, yk)
            m1 = quad_under_normal(lambda f, mu=mu: p(f) * (f - mu), mu, v, yk) / Z
            m2 = quad_under_normal(lambda f, mu=mu: p(f) * (f - mu) ** 2, mu, v, yk) / Z - m1**2
            assert abs(float(log_Z[k]) - math.log(Z)) < 1e-9
            assert abs(float(d1[k]) - m1 / v) < 1e-7 * (1 + abs(m1 / v))
            assert abs(float(d2[k]) - (m2 - v) / v**2) < 1e-6 * (1 + abs((m2 - v) / v**2))
            if alpha == 1.0:
                assert abs(float(density[k]) - math.log(Z)) < 1e-9


def test_gradients_match_finite_differences():
    # in the degrees of freedom and the scale (their raw parameters) and the mean and variance
    lik = StudentT(df=2.5, scale=0.7)
    mean = t([0.1, -0.8, 2.0]).requires_grad_()
    var = t([0.3, 1.1, 0.05]).requires_grad_()
    y = t([0.0, 3.5, 2.2])

    def through_parameters(fn):
        def wrapped(raw_df, raw_scale, m, v):
            old = lik.raw_df, lik.raw_scale
            lik._parameters["raw_df"], lik._parameters["raw_scale"] = raw_df, raw_scale
            try:
                return fn(m, v)
            finally:
                lik._parameters["raw_df"], lik._parameters["raw_scale"] = old
        return wrapped

    raw = [lik.raw_df.detach().clone().requires_grad_(), lik.raw_scale.detach().clone().requires_grad_()]
    for fn in (lambda m, v: lik.variational_expectations(m, v, y),
               lambda m, v: lik.predict_log_density(m, v, y),
               lambda m, v: lik.tilted_moments(m, v, y, 0.5)[0],
               lambda m, v: lik.log_prob(m, y)):
        assert torch.autograd.gradcheck(through_parameters(fn), (*raw, mean, var),
                                        atol=1e-7, rtol=1e-6)


def test_large_df_approaches_the_gaussian():
    # residuals of a few σ (the gap is O(r⁴/(νσ⁴)): 1e-3 at r = 8σ)
    mean, var, y = t([0.0, 1.0, -2.0, 0.3]), t([0.2, 0.1, 0.3, 1e-3]), t([0.4, 0.7, -1.5, 0.3])
    lik, gauss = StudentT(df=1e6, scale=0.6), Gaussian(variance=0.36)
    with torch.no_grad():
        torch.testing.assert_close(lik.variational_expectations(mean, var, y),
                                   gauss.variational_expectations(mean, var, y), rtol=0, atol=1e-5)
        torch.testing.assert_close(lik.predict_log_density(mean, var, y),
                                   gauss.predict_log_density(mean, var, y), rtol=0, atol=1e-5)
        for a, b in zip(lik.tilted_moments(mean, var, y, 0.5), gauss.tilted_moments(mean, var, y, 0.5)):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def test_predictive_moments_and_their_infinite_variance():
    mean, var = t([0.0, 1.5]), t([0.2, 1.0])
    m, v = StudentT(df=5.0, scale=0.5).predict_mean_and_var(mean, var)
    torch.testing.assert_close(m, mean)
    torch.testing.assert_close(v, var + 0.25 * 5.0 / 3.0)
    m, v = StudentT(df=1.5, scale=0.5).predict_mean_and_var(mean, var)  # no finite variance
    torch.testing.assert_close(m, mean)
    assert bool(torch.isinf(v).all())


def test_parameters_config_and_floors():
    lik = StudentT(df=4.0, scale=0.5)
    lik.df, lik.scale = 0.05, 2.0  # ν > 0 is allowed down to the floor
    cfg = lik.config()
    assert cfg["type"] == "StudentT" and set(cfg["args"]) == {"df", "scale", "quadrature_points"}
    back = likelihood_from_config(cfg)
    back.load_state_dict(lik.state_dict())
    assert (back.df, back.scale) == (lik.df, lik.scale)
    with pytest.raises(ValueError, match="df"):
        StudentT(df=DF_FLOOR)
    with pytest.raises(ValueError, match="scale"):
        StudentT(scale=0.0)
    with pytest.raises(ValueError, match="df"):
        StudentT(df=[3.0, 4.0])  # one value


def _outliers():
    X, y = sg.datasets.snelson()
    rng = np.random.default_rng(0)
    corrupted = y.copy()
    corrupted[rng.choice(len(y), 20, replace=False)] += 8.0  # 10% gross outliers
    return X, y, corrupted


def test_svgp_with_student_t_ignores_gross_outliers():
    X, clean, y = _outliers()
    Xt = np.linspace(0.1, 5.9, 100)[:, None]
    reference = sg.SGPR(X, clean, inducing_points=15)
    reference.fit()
    truth = reference.predict_f(Xt)[0]  # the function the clean data give

    def rmse(model):
        return float(np.sqrt(np.mean((model.predict_f(Xt)[0] - truth) ** 2)))

    gaussian = sg.SVGP(X, y, inducing_points=15)
    gaussian.fit()
    robust = sg.SVGP(X, y, likelihood=StudentT(df=3.0, scale=0.3), inducing_points=15)
    robust.fit(epochs=300, lr=0.05)
    # measured: Gaussian 1.14 (as SGPR's), Student-t 0.043
    assert rmse(robust) < 0.1 < 1.0 < rmse(gaussian)
    assert robust.likelihood.df < 3.0  # the outliers call for heavier tails


@pytest.mark.parametrize("alpha", [0.5, 1.0])
def test_sgpc_runs_power_ep_under_student_t(alpha):
    X, _, y = _outliers()
    model = sg.SGPC(X[::4], y[::4], likelihood=StudentT(df=3.0, scale=0.3), alpha=alpha,
                    inducing_points=10)
    assert not model.classifies
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the round limit is hit on purpose
        result = model.fit(maxiter=2, inner_maxiter=10)
    # the outliers' sites would take negative precisions: those updates are skipped and counted
    assert result.info["skipped_updates"] > 0 and result.info["sweeps"] > 0
    Xt = X[:7]
    mean, var = model.predict_y(Xt)
    predicted = model.predict(Xt)  # moments, not labels
    assert mean.shape == var.shape == (7,) and np.isfinite(mean).all()
    np.testing.assert_array_equal(predicted[0], mean)
    # ν ≤ 2 has no finite variance: inf; else at least the latent variance
    if model.likelihood.df <= 2.0:
        assert np.isinf(var).all()
    else:
        assert (var > model.predict_f(Xt)[1]).all()
