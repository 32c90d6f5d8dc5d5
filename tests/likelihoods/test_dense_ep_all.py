"""SGPC with Z = X at fixed hyperparameters against the dense Power-EP reference
(`dense_ep.py`) for every single-latent likelihood SGPC takes: the posterior mean and
variance of f at the data and the energy (approximate log marginal likelihood), at α = 1
(EP) and α = ½.

Tolerances. The two differ in their tilted moments only: the library's Gauss–Hermite rules
(32 points, centred on the integrand's mode for the count, Gamma and Beta likelihoods, 100
for Beta; the closed forms of the probit Bernoulli at α = 1; the trapezoid rule over the
Student-t's scale mixture) against adaptive Gauss–Kronrod quadrature at 1e-12. An n-point
Gauss–Hermite rule is exact for polynomials of degree < 2n in the standardised variable, and
for these smooth integrands, whose cavity variances here are below 1 (prior variance 1), the
error is at rounding level: checked at the reference's converged cavities against `TILTED`
(measured ≤ 1.2e-11, on the Poisson's ∂² log Z̃ at α = 1). The reference stops when no site
changes by more than 1e-11 (relative), and an error ε in the tilted moments moves the EP
fixed point by about ε times the conditioning of the site equations (≤ 10 with N = 12 unit
prior variances), so the posterior moments and the energy must agree to `AGREE` = 1e-8
(measured ≤ 3.2e-10 for the moments, Beta at α = 1, and 9.0e-10 for the energy, Beta at
α = ½). With prior
variances near 9 the cavity variances reach 9 and the 32-point rule errs by up to 3e-6
(Poisson, y = 0), as the likelihoods' docstrings state; that is the rule's accuracy, not a
fault, and is not what this test measures.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

import sparsegp as sg
from sparsegp import likelihoods as L

from . import dense_ep as ref

N, ELL, VAR = 12, 1.0, 1.0
TILTED, AGREE = 1e-9, 1e-8


def _latent(seed):
    rng = np.random.default_rng(seed)
    X = np.sort(rng.uniform(0.0, 6.0, (N, 1)), 0)
    K = VAR * np.exp(-0.5 * (X - X.T) ** 2 / ELL**2)
    f = np.linalg.cholesky(K + 1e-9 * np.eye(N)) @ rng.normal(size=N)
    return X, K, f, rng


def case(name):
    """(X, K, y, the library's likelihood, the reference's log-likelihoods, split points)."""
    X, K, f, rng = _latent({"Bernoulli": 1, "BernoulliLogit": 8, "Poisson": 2, "StudentT": 3,
                            "NegativeBinomial": 4, "Gamma": 5, "Beta": 6, "Ordinal": 7}[name])
    none = [()] * N
    if name == "Bernoulli":
        y = (f + 0.3 * rng.normal(size=N) > 0).astype(float)
        return X, K, y, L.Bernoulli(), [ref.bernoulli(v) for v in y], none
    if name == "BernoulliLogit":
        y = (f + 0.3 * rng.normal(size=N) > 0).astype(float)
        return X, K, y, L.Bernoulli(link="logit"), [ref.bernoulli(v, "logit") for v in y], none
    if name == "Poisson":
        y = rng.poisson(np.exp(f + 0.5)).astype(float)
        return X, K, y, L.Poisson(), [ref.poisson(v) for v in y], none
    if name == "StudentT":
        y = f + 0.3 * rng.normal(size=N)
        return (X, K, y, L.StudentT(df=4.0, scale=0.5), [ref.student_t(v, 4.0, 0.5) for v in y],
                [(v,) for v in y])
    if name == "NegativeBinomial":
        mu = np.exp(f + 1.0)
        y = rng.negative_binomial(2.0, 2.0 / (2.0 + mu)).astype(float)
        return (X, K, y, L.NegativeBinomial(dispersion=2.0),
                [ref.negative_binomial(v, 2.0) for v in y], none)
    if name == "Gamma":
        y = rng.gamma(3.0, np.exp(f) / 3.0)
        return X, K, y, L.Gamma(shape=3.0), [ref.gamma(v, 3.0) for v in y], none
    if name == "Beta":
        mu = 1.0 / (1.0 + np.exp(-f))
        y = np.clip(rng.beta(mu * 10.0, (1.0 - mu) * 10.0), 1e-3, 1 - 1e-3)
        return X, K, y, L.Beta(precision=10.0), [ref.beta(v, 10.0) for v in y], none
    cuts = [-0.8, 0.2, 1.0]
    y = np.searchsorted(np.asarray(cuts), f + 0.5 * rng.normal(size=N)).astype(float)
    return (X, K, y, L.Ordinal(4, cutpoints=cuts, scale=0.7),
            [ref.ordinal(int(v), cuts, 0.7) for v in y], [tuple(cuts)] * N)


NAMES = ["Bernoulli", "BernoulliLogit", "Poisson", "StudentT", "NegativeBinomial", "Gamma", "Beta", "Ordinal"]


@pytest.mark.parametrize("alpha", [1.0, 0.5])
@pytest.mark.parametrize("name", NAMES)
def test_sgpc_with_z_equal_x_is_dense_power_ep(name, alpha):
    X, K, y, lik, log_liks, points = case(name)
    dense = ref.dense_ep(K, log_liks, alpha=alpha, points=points)
    model = sg.SGPC(X, y, kernel=sg.kernels.SquaredExponential(lengthscale=ELL, variance=VAR),
                    likelihood=lik, inducing_points=X, alpha=alpha, jitter=1e-10)
    info = model.update_sites(max_sweeps=3000, tol=1e-13)
    assert info["skipped_updates"] == 0
    mean, var = model.predict_f(X)
    np.testing.assert_allclose(mean, dense.mean, rtol=0, atol=AGREE)
    np.testing.assert_allclose(var, dense.var, rtol=0, atol=AGREE)
    assert model.log_marginal_likelihood() == pytest.approx(dense.log_z, abs=AGREE)
    # the one thing the two compute differently: the tilted moments at the same cavities
    s_c = 1.0 / (1.0 / dense.var - alpha * dense.tau)
    mu_c = s_c * (dense.mean / dense.var - alpha * dense.nu)
    with torch.no_grad():
        got = lik.tilted_moments(torch.as_tensor(mu_c), torch.as_tensor(s_c),
                                 lik.check_targets(torch.as_tensor(y)), alpha)
    for n in range(N):
        log_z, m_t, v_t = ref.tilted(log_liks[n], mu_c[n], s_c[n], alpha, points[n])
        want = (log_z, (m_t - mu_c[n]) / s_c[n], (v_t - s_c[n]) / s_c[n] ** 2)
        for g, w in zip(got, want):
            assert abs(float(g[n]) - w) <= TILTED * (1.0 + abs(w)), (name, n, float(g[n]), w)


def test_reference_log_likelihoods_are_scipy_densities():
    f = np.linspace(-2.0, 2.0, 5)
    mu = np.exp(f)
    p = 1.0 / (1.0 + np.exp(-f))
    checks = [
        (ref.bernoulli(1.0)(f), stats.norm.logcdf(f)),
        (ref.bernoulli(0.0, "logit")(f), np.log(1.0 - p)),
        (ref.poisson(3.0)(f), stats.poisson.logpmf(3, mu)),
        (ref.student_t(0.4, 4.0, 0.5)(f), stats.t.logpdf(0.4, 4.0, loc=f, scale=0.5)),
        (ref.negative_binomial(3.0, 2.0)(f), stats.nbinom.logpmf(3, 2.0, 2.0 / (2.0 + mu))),
        (ref.gamma(1.5, 3.0)(f), stats.gamma.logpdf(1.5, 3.0, scale=mu / 3.0)),
        (ref.beta(0.3, 10.0)(f), stats.beta.logpdf(0.3, 10.0 * p, 10.0 * (1.0 - p))),
        (ref.ordinal(1, [-0.8, 0.2], 0.7)(f),
         np.log(stats.norm.cdf((0.2 - f) / 0.7) - stats.norm.cdf((-0.8 - f) / 0.7))),
    ]
    for got, want in checks:
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)


def test_reference_tilted_moments_of_a_gaussian_likelihood_are_exact():
    # N(f; μ, v) N(y; f, σ²)^α: Gaussian with precision 1/v + α/σ² and mean by precision-weighting
    mu, v, y, s2, alpha = 0.3, 2.0, 1.7, 0.25, 0.5
    log_z, m, var = ref.tilted(lambda f: stats.norm.logpdf(y, f, np.sqrt(s2)), mu, v, alpha)
    prec = 1.0 / v + alpha / s2
    assert var == pytest.approx(1.0 / prec, rel=1e-11)
    assert m == pytest.approx((mu / v + alpha * y / s2) / prec, rel=1e-11)
    # ∫ N(f; μ, v) N(y; f, σ²)^α df = (2πσ²)^((1−α)/2) α^(−½) N(y; μ, v + σ²/α)
    want = (0.5 * (1 - alpha) * np.log(2 * np.pi * s2) - 0.5 * np.log(alpha)
            + stats.norm.logpdf(y, mu, np.sqrt(v + s2 / alpha)))
    assert log_z == pytest.approx(want, abs=1e-11)
