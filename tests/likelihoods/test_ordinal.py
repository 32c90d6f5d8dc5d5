"""The ordinal likelihood: its probabilities against scipy (and mpmath in the tails), its
Gaussian expectations, predictive probabilities and Power-EP tilted moments against adaptive
quadrature (probit and logit), gradients, the binary case as Bernoulli, cut points learned by
SVGP, and SGPC at α = 1 with Z = X against a dense EP reference."""

from __future__ import annotations

import math
import warnings

import mpmath
import numpy as np
import pytest
import torch
from scipy import integrate, optimize, special, stats
from scipy.linalg import cho_factor, cho_solve

import sparsegp as sg
from sparsegp.likelihoods import Bernoulli, Ordinal, likelihood_from_config

from . import dense_ep
from .references import normal_logpdf

F64 = torch.float64
CUTS = [-1.0, 0.3, 2.0]


def t(a):
    return torch.as_tensor(a, dtype=F64)


def log_prob_ref(f, y, link, scale, cuts=CUTS):
    """log p(y | f) from scipy's distributions, each difference taken in the tail where it is
    small (log-space: finite wherever the quadrature below looks)."""
    c = [-np.inf, *cuts, np.inf]
    hi, lo = (c[y + 1] - f) / scale, (c[y] - f) / scale
    if link == "probit":
        if lo + hi > 0:  # upper tail: Φ(hi) − Φ(lo) = Φ(−lo) − Φ(−hi)
            hi, lo = -lo, -hi
        top, bottom = special.log_ndtr(hi), special.log_ndtr(lo)
    elif lo + hi > 0:  # the logistic's log survival function: −log(1 + eˣ)
        top, bottom = -np.logaddexp(0.0, lo), -np.logaddexp(0.0, hi)
    else:  # and its log cdf: −log(1 + e⁻ˣ)
        top, bottom = -np.logaddexp(0.0, -hi), -np.logaddexp(0.0, -lo)
    return float(top + np.log1p(-np.exp(bottom - top)))


def quad_under_normal(fn, mu, v, cuts=CUTS):
    """∫ fn(f) N(f; μ, v) df by adaptive quadrature, split at the cut points."""
    sd = math.sqrt(v)
    lo, hi = mu - 30 * sd, mu + 30 * sd
    points = [c for c in cuts if lo < c < hi] or None
    return integrate.quad(lambda f: fn(f) * math.exp(normal_logpdf(f, mu, sd)), lo, hi, points=points,
                          limit=1000, epsabs=1e-13, epsrel=1e-13)[0]


def tilted_reference(log_lik, mu, v, alpha, cuts=CUTS):
    """log Z̃, (m̃ − μ)/v and (ṽ − v)/v² by adaptive quadrature of N(f; μ, v) p^α scaled by its
    value at its (single: log p is concave) mode."""
    sd = math.sqrt(v)

    def log_g(f):
        return alpha * log_lik(f) + normal_logpdf(f, mu, sd)

    mode = optimize.minimize_scalar(lambda f: -log_g(f), bounds=(mu - 30 * sd, mu + 30 * sd),
                                    method="bounded", options={"xatol": 1e-12}).x
    top = log_g(mode)
    lo, hi = mode - 30 * sd, mode + 30 * sd
    points = sorted({mode, *[c for c in cuts if lo < c < hi]})

    def q(fn):
        return integrate.quad(lambda f: fn(f) * math.exp(log_g(f) - top), lo, hi, points=points,
                              limit=1000, epsabs=1e-15, epsrel=1e-13)[0]

    Z = q(lambda f: 1.0)
    m1 = q(lambda f: f - mu) / Z
    m2 = q(lambda f: (f - mu - m1) ** 2) / Z
    return math.log(Z) + top, m1 / v, (m2 - v) / v**2


@pytest.mark.parametrize("link", ["probit", "logit"])
def test_log_prob_matches_scipy_and_mpmath_in_the_tails(link):
    lik = Ordinal(4, cutpoints=CUTS, link=link, scale=0.7)
    f = np.linspace(-6.0, 6.0, 13)
    for y in range(4):
        with torch.no_grad():
            got = lik.log_prob(t(f), t(np.full(13, float(y)))).numpy()
        dist = stats.norm if link == "probit" else stats.logistic
        c = [-np.inf, *CUTS, np.inf]
        hi, lo = (c[y + 1] - f) / 0.7, (c[y] - f) / 0.7
        ref = np.log(np.where(lo + hi > 0, dist.sf(lo) - dist.sf(hi), dist.cdf(hi) - dist.cdf(lo)))
        assert np.all(np.abs(got - ref) <= 1e-9 * (1 + np.abs(ref))), (y, got - ref)
    # far tails, where the difference of probabilities cancels in double precision
    mpmath.mp.dps = 60
    F = mpmath.ncdf if link == "probit" else (lambda z: 1 / (1 + mpmath.exp(-z)))
    for fk in (-40.0, -12.0, 15.0, 45.0):
        for y in range(4):
            c = [-mpmath.inf, *CUTS, mpmath.inf]
            hi, lo = (c[y + 1] - fk) / 0.7, (c[y] - fk) / 0.7
            # in the upper tail by symmetry, 1 − F(x) = F(−x)
            ref = float(mpmath.log(F(-lo) - F(-hi) if lo + hi > 0 else F(hi) - F(lo)))
            with torch.no_grad():
                got = float(lik.log_prob(t([fk]), t([float(y)])))
            assert abs(got - ref) <= 1e-12 * (1 + abs(ref)), (fk, y, got, ref)


@pytest.mark.parametrize("link", ["probit", "logit"])
@pytest.mark.parametrize("scale", [0.3, 1.0])
def test_variational_expectations_match_adaptive_quadrature(link, scale):
    lik = Ordinal(4, cutpoints=CUTS, link=link, scale=scale)
    # √v up to 13σ: the trapezoid grid still resolves the likelihood's edges
    grid = [(mu, v, y) for mu in (-3.0, 0.0, 2.0) for v in (0.01, 0.5, 4.0, 16.0) for y in range(4)]
    mean, var, y = (t([g[i] for g in grid]) for i in range(3))
    with torch.no_grad():
        got = lik.variational_expectations(mean, var, y).numpy()
    for j, (mu, v, yk) in enumerate(grid):
        ref = quad_under_normal(lambda f, yk=yk: log_prob_ref(f, yk, link, scale), mu, v)
        assert abs(got[j] - ref) < 1e-9 * (1 + abs(ref)), (mu, v, yk, got[j], ref)


@pytest.mark.parametrize("link", ["probit", "logit"])
@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_tilted_moments_and_predictive_density_match_adaptive_quadrature(link, alpha):
    for scale in ((0.3, 1.0) if alpha == 1.0 else (0.3,)):  # α = ½: the same code, tempered
        lik = Ordinal(4, cutpoints=CUTS, link=link, scale=scale)
        # includes labels the prior puts 50 standard deviations away (μ = −3, v = 0.01, y = 3)
        cases = [(mu, v, y) for mu in (-3.0, 0.0, 2.0) for v in (0.01, 0.5, 4.0) for y in range(4)]
        mean, var, y = (t([c[i] for c in cases]) for i in range(3))
        with torch.no_grad():
            log_Z, d1, d2 = lik.tilted_moments(mean, var, y, alpha)
            density = lik.predict_log_density(mean, var, y)
        for j, (mu, v, yk) in enumerate(cases):
            ref = tilted_reference(lambda f, yk=yk, s=scale: log_prob_ref(f, yk, link, s), mu, v, alpha)
            # measured: ≤ 5e-12 (relative to 1 + |value|)
            for got, want in zip((log_Z[j], d1[j], d2[j]), ref):
                assert abs(float(got) - want) < 1e-9 * (1 + abs(want)), (scale, j, float(got), want)
            if alpha == 1.0:
                assert abs(float(density[j]) - ref[0]) < 1e-9 * (1 + abs(ref[0]))


@pytest.mark.parametrize("link", ["probit", "logit"])
def test_predictive_class_probabilities_match_quadrature(link):
    lik = Ordinal(4, cutpoints=CUTS, link=link, scale=0.5)
    cases = [(0.0, 0.3), (1.2, 1.0), (-0.5, 6.0)]
    mean, var = t([c[0] for c in cases]), t([c[1] for c in cases])
    with torch.no_grad():
        p, pv = lik.predict_mean_and_var(mean, var)
    assert p.shape == pv.shape == (3, 4)
    torch.testing.assert_close(p.sum(-1), t([1.0, 1.0, 1.0]), rtol=0, atol=1e-12)
    torch.testing.assert_close(pv, p * (1 - p))
    for j, (mu, v) in enumerate(cases):
        for k in range(4):
            ref = quad_under_normal(lambda f, k=k: math.exp(log_prob_ref(f, k, link, 0.5)), mu, v)
            assert abs(float(p[j, k]) - ref) < 1e-10, (j, k, float(p[j, k]), ref)


def test_two_classes_are_bernoulli_shifted_by_the_cut_point():
    # p(y = 1 | f) = Φ((f − c)/σ): the probit Bernoulli of (f − c)/σ
    lik, bern = Ordinal(2, cutpoints=[0.4], scale=0.8), Bernoulli()
    mean, var, y = t([0.1, -1.0, 2.0]), t([0.3, 1.5, 0.05]), t([1.0, 0.0, 1.0])
    m, v = (mean - 0.4) / 0.8, var / 0.64
    with torch.no_grad():
        torch.testing.assert_close(lik.log_prob(mean, y), bern.log_prob(m, y))
        torch.testing.assert_close(lik.predict_log_density(mean, var, y), bern.predict_log_density(m, v, y))
        # Bernoulli's is Gauss–Hermite quadrature with 32 points: 1e-9 off at v = 2.3
        torch.testing.assert_close(lik.variational_expectations(mean, var, y),
                                   bern.variational_expectations(m, v, y), rtol=0, atol=1e-8)
        torch.testing.assert_close(lik.predict_mean_and_var(mean, var)[0][:, 1],
                                   bern.predict_mean_and_var(m, v)[0])
        for a, b, unit in zip(lik.tilted_moments(mean, var, y, 1.0), bern.tilted_moments(m, v, y, 1.0),
                              (1.0, 0.8, 0.64)):
            torch.testing.assert_close(a, b / unit)


@pytest.mark.parametrize("link", ["probit", "logit"])
def test_gradients_match_finite_differences(link):
    # in the first cut, the raw gaps, and the mean and variance
    lik = Ordinal(4, cutpoints=CUTS, link=link, scale=0.6)
    mean = t([0.1, -0.8, 2.0, 0.5]).requires_grad_()
    var = t([0.3, 1.1, 0.05, 2.0]).requires_grad_()
    y = t([0.0, 1.0, 2.0, 3.0])

    def through_parameters(fn):
        def wrapped(first, raw_gaps, m, v):
            old = lik.first_cut, lik.raw_gaps
            lik._parameters["first_cut"], lik._parameters["raw_gaps"] = first, raw_gaps
            try:
                return fn(m, v)
            finally:
                lik._parameters["first_cut"], lik._parameters["raw_gaps"] = old
        return wrapped

    raw = [lik.first_cut.detach().clone().requires_grad_(), lik.raw_gaps.detach().clone().requires_grad_()]
    for fn in (lambda m, v: lik.variational_expectations(m, v, y),
               lambda m, v: lik.predict_log_density(m, v, y),
               lambda m, v: lik.tilted_moments(m, v, y, 0.5)[0],
               lambda m, v: lik.tilted_moments(m, v, y, 1.0),
               lambda m, v: lik.predict_mean_and_var(m, v)[0],
               lambda m, v: lik.log_prob(m, y)):
        assert torch.autograd.gradcheck(through_parameters(fn), (*raw, mean, var), atol=1e-7, rtol=1e-6)


def test_parameters_config_and_validation():
    lik = Ordinal(4, cutpoints=[-0.5, 0.0, 3.0], link="logit", scale=0.5)
    assert lik.parameter_names() == ["first_cut", "gaps"]
    np.testing.assert_allclose(lik.cutpoints, [-0.5, 0.0, 3.0], atol=1e-15)
    lik.cutpoints = [-2.0, 1.0, 1.5]
    np.testing.assert_allclose(lik.cutpoints, [-2.0, 1.0, 1.5], atol=1e-15)
    cfg = lik.config()
    assert cfg["type"] == "Ordinal"
    assert {k: v for k, v in cfg["args"].items() if k != "cutpoints"} == {
        "num_classes": 4, "link": "logit", "scale": 0.5, "quadrature_points": 32}
    back = likelihood_from_config(cfg)
    back.load_state_dict(lik.state_dict())
    assert back.config() == cfg and back.cutpoints.tolist() == lik.cutpoints.tolist()
    np.testing.assert_allclose(Ordinal(5).cutpoints, [-1.5, -0.5, 0.5, 1.5])  # default: unit gaps
    assert Ordinal(2).parameter_names() == ["first_cut"]
    with pytest.raises(ValueError, match="num_classes"):
        Ordinal(1)
    with pytest.raises(ValueError, match="strictly increasing"):
        Ordinal(3, cutpoints=[1.0, 0.5])
    with pytest.raises(ValueError, match="2 values"):
        Ordinal(3, cutpoints=[0.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="scale"):
        Ordinal(3, scale=0.0)
    with pytest.raises(ValueError, match="link"):
        Ordinal(3, link="cloglog")
    for bad in ([0.0, 1.5], [0.0, 4.0], [-1.0], [math.nan]):
        with pytest.raises(ValueError, match=r"integers in 0\.\.3"):
            lik.check_targets(t(bad))
    with pytest.raises(ValueError, match=r"integers in 0\.\.3"):
        sg.SVGP(np.zeros((3, 1)), np.array([0.0, 4.0, 1.0]), likelihood=Ordinal(4))
    with pytest.raises(ValueError, match=r"integers in 0\.\.2"):
        sg.SGPC(np.zeros((3, 1)), np.array([0.0, 0.5, 1.0]), likelihood=Ordinal(3))


def _ordered_labels(n, seed, cuts=(-1.0, 0.5, 1.5)):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 6.0, (n, 1))
    latent = 2.0 * np.sin(X[:, 0]) + rng.normal(size=n)  # noise of scale σ = 1
    return X, np.searchsorted(np.asarray(cuts), latent).astype(float)


def test_svgp_recovers_the_cut_points():
    X, y = _ordered_labels(500, seed=0)
    Xt, yt = _ordered_labels(500, seed=1)
    model = sg.SVGP(X, y, likelihood=Ordinal(4), inducing_points=12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a short budget; converged enough
        model.fit(epochs=300, lr=0.05)
    p = model.predict_y(Xt)[0]
    assert p.shape == (500, 4)
    np.testing.assert_allclose(p.sum(-1), 1.0, atol=1e-12)
    accuracy = float(np.mean(p.argmax(-1) == yt))
    nlpd = -float(np.mean(model.predict_log_density(Xt, yt)))
    # measured: cut points −0.95, 0.52, 1.57 (truth −1, 0.5, 1.5); accuracy 0.574; NLPD 0.920
    np.testing.assert_allclose(model.likelihood.cutpoints, [-1.0, 0.5, 1.5], atol=0.25)
    assert accuracy > 0.5 and nlpd < 1.0


def test_sgpc_alpha_one_with_z_equal_x_is_dense_ep():
    X, y = _ordered_labels(25, seed=4)
    ell, var, scale, cuts = 0.8, 2.0, 0.7, [-1.0, 0.5, 1.5]
    K = var * np.exp(-0.5 * (X - X.T) ** 2 / ell**2)
    dense = dense_ep.dense_ep(K, [dense_ep.ordinal(int(v), cuts, scale) for v in y],
                              points=[cuts] * len(y))
    tau, nu = dense.tau, dense.nu
    model = sg.SGPC(X, y, kernel=sg.kernels.SquaredExponential(lengthscale=ell, variance=var),
                    likelihood=Ordinal(4, cutpoints=cuts, scale=scale), inducing_points=X,
                    alpha=1.0, jitter=1e-10)
    info = model.update_sites(max_sweeps=3000, tol=1e-14)
    assert info["skipped_updates"] == 0  # log-concave: no site precision turns negative
    np.testing.assert_allclose(model.tau.numpy(), tau, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(model.nu.numpy(), nu, rtol=1e-6, atol=1e-8)
    # predictive class probabilities of dense EP, from its posterior at new points
    Xs = np.linspace(0.0, 6.0, 7)[:, None]
    Ks = var * np.exp(-0.5 * (X - Xs.T) ** 2 / ell**2)
    cf = cho_factor(K + np.diag(1.0 / tau))
    m = Ks.T @ cho_solve(cf, nu / tau)
    v = var - np.sum(Ks * cho_solve(cf, Ks), 0)
    F = stats.norm.cdf((np.array(cuts)[None, :] - m[:, None]) / np.sqrt(scale**2 + v[:, None]))
    p = np.diff(np.concatenate([np.zeros((7, 1)), F, np.ones((7, 1))], 1), axis=1)
    np.testing.assert_allclose(model.predict_y(Xs)[0], p, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("alpha", [0.5, 1.0])
def test_sgpc_runs_power_ep_under_ordinal(alpha):
    X, y = _ordered_labels(60, seed=2)
    model = sg.SGPC(X, y, likelihood=Ordinal(4, link="logit"), alpha=alpha, inducing_points=8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a short run may hit the round limit
        result = model.fit(maxiter=3, inner_maxiter=20)
    assert result.info["sweeps"] > 0 and result.info["skipped_updates"] == 0
    p = model.predict_y(X[:7])[0]
    assert p.shape == (7, 4)
    np.testing.assert_allclose(p.sum(-1), 1.0, atol=1e-12)
    assert np.isfinite(model.predict_log_density(X[:7], y[:7])).all()
    assert model.likelihood.cutpoints.tolist() != [-1.0, 0.0, 1.0]  # learned


def test_models_with_the_ordinal_likelihood_predict_labels_and_probabilities():
    # `predict` means labels under every classification likelihood, `predict_proba` the K
    # class probabilities, for SVGP and SGPC alike
    rng = np.random.default_rng(5)
    X = rng.uniform(-2, 2, (60, 1))
    labels = np.digitize(np.sin(2 * X[:, 0]), [-0.5, 0.0, 0.5]).astype(float)
    for model in (sg.SVGP(X, labels, likelihood=sg.likelihoods.Ordinal(4), inducing_points=8),
                  sg.SGPC(X, labels, likelihood=sg.likelihoods.Ordinal(4), inducing_points=8)):
        proba = model.predict_proba(X[:5])
        assert proba.shape == (5, 4)
        np.testing.assert_allclose(proba.sum(1), 1.0, rtol=1e-10)
        np.testing.assert_array_equal(model.predict(X[:5]), proba.argmax(1))


@pytest.mark.parametrize("model", [sg.SVGP, sg.SGPC])
def test_a_class_without_training_labels_is_named_in_a_warning(model):
    """With no label in the middle class nothing holds its cut points apart: a fit shrinks
    its interval (measured: p(class 1) below 0.01 everywhere under SVGP and SGPC) — said at
    construction."""
    X = np.linspace(0, 3, 30)[:, None]
    y = np.where(X[:, 0] < 1.5, 0.0, 2.0)
    with pytest.warns(UserWarning, match=r"no training label is in class \[1\]"):
        m = model(X, y, likelihood=sg.likelihoods.Ordinal(3), inducing_points=5)
    if model is sg.SGPC:  # the faster fit of the two
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m.fit(progress=False)
        assert np.max(m.predict_y(X)[0][:, 1]) < 0.02  # what the warning says happens
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every class present: no warning
        model(X, np.floor(X[:, 0]).clip(0, 2), likelihood=sg.likelihoods.Ordinal(3),
              inducing_points=5)
