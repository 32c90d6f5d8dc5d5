"""Likelihoods: closed forms against quadrature, scipy and Monte Carlo; Power-EP tilted moments;
multi-class links; label checks; config round trips."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from scipy import integrate, special, stats

from sparsegp.likelihoods import Bernoulli, Gaussian, Likelihood, MultiClass, Poisson, likelihood_from_config

F64 = torch.float64


def t(a):
    return torch.as_tensor(a, dtype=F64)


LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def log_phi(x):
    return -0.5 * x * x - LOG_SQRT_2PI


def np_log_prob(lik: Likelihood, f, y: float, alpha: float = 1.0):
    """α log p(y | f) with numpy/scipy only (independent of the torch code); f a float or array."""
    if isinstance(lik, Gaussian):
        lp = log_phi((y - f) / math.sqrt(lik.variance)) - 0.5 * math.log(lik.variance)
    elif isinstance(lik, Poisson):
        lp = y * f - np.exp(f) - special.gammaln(y + 1.0)
    elif lik.link == "probit":
        lp = special.log_ndtr((2 * y - 1) * f)
    else:
        lp = -np.logaddexp(0.0, -(2 * y - 1) * f)
    return alpha * lp


def scipy_log_Z(lik: Likelihood, mu: float, v: float, y: float, alpha: float = 1.0) -> float:
    """log ∫ N(f; μ, v) p(y | f)^α df with scipy.integrate.quad in t = (f − μ)/√v, scaled by its
    maximum (found on a fine grid) so that tiny normalisers (1e-100) are integrated accurately."""
    def log_g(tt):
        return log_phi(tt) + np_log_prob(lik, mu + math.sqrt(v) * tt, y, alpha)

    grid = np.linspace(-40.0, 40.0, 80001)
    vals = log_g(grid)
    top, t_max = float(np.max(vals)), float(grid[np.argmax(vals)])
    val, _ = integrate.quad(lambda tt: math.exp(log_g(tt) - top), -40.0, 40.0, points=[t_max],
                            epsabs=0.0, epsrel=1e-13, limit=500)
    return math.log(val) + top


def scipy_expectation(fn, mu: float, v: float) -> float:
    """E_{N(f; μ, v)}[fn(f)] with scipy.integrate.quad."""
    sd = math.sqrt(v)
    val, _ = integrate.quad(lambda f: math.exp(log_phi((f - mu) / sd)) / sd * fn(f), mu - 30 * sd,
                            mu + 30 * sd, epsabs=1e-14, epsrel=1e-12, limit=200)
    return val


# -- closed forms against quadrature and scipy ----------------------------------------------
CLOSED = [
    (Gaussian(variance=0.3), [0.4, -1.0, 2.5], [0.7, 0.05, 2.0], [1.2, -0.3, 2.0]),
    (Poisson(), [0.3, -1.0, 1.5], [0.5, 0.05, 1.2], [3.0, 0.0, 7.0]),
]


@pytest.mark.parametrize("lik,m,v,y", CLOSED, ids=["Gaussian", "Poisson"])
def test_closed_forms_equal_quadrature_and_scipy(lik, m, v, y):
    # The base-class reference uses 150 points: with 32, plain Gauss–Hermite is off by up to 4e-4
    # (Gaussian, σ² ≪ v) and 1e-5 (Poisson) in the predictive density.
    m, v, y = t(m), t(v), t(y)
    cfg = lik.config()
    ref_lik = likelihood_from_config({**cfg, "args": {**cfg["args"], "quadrature_points": 150}})
    ve = lik.variational_expectations(m, v, y).detach()
    pld = lik.predict_log_density(m, v, y).detach()
    ref_ve = Likelihood.variational_expectations(ref_lik, m, v, y)
    torch.testing.assert_close(ve, ref_ve, rtol=1e-11, atol=1e-11)
    torch.testing.assert_close(pld, Likelihood.predict_log_density(ref_lik, m, v, y), rtol=1e-9, atol=1e-10)
    mean, var = (a.detach() for a in lik.predict_mean_and_var(m, v))
    qmean, qvar = Likelihood.predict_mean_and_var(ref_lik, m, v)
    torch.testing.assert_close(mean, qmean, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(var, qvar, rtol=1e-9, atol=1e-12)
    for i in range(len(m)):
        mi, vi, yi = float(m[i]), float(v[i]), float(y[i])
        ref_ve = scipy_expectation(lambda f, yi=yi: np_log_prob(lik, f, yi), mi, vi)
        assert abs(float(ve[i]) - ref_ve) < 1e-9 * (1 + abs(ref_ve))
        ref_pld = scipy_log_Z(lik, mi, vi, yi)
        assert abs(float(pld[i]) - ref_pld) < 1e-9 * (1 + abs(ref_pld))
        Ey = scipy_expectation(math.exp if isinstance(lik, Poisson) else (lambda f: f), mi, vi)
        assert abs(float(mean[i]) - Ey) < 1e-9 * (1 + abs(Ey))


def test_poisson_adaptive_quadrature_handles_large_counts():
    # The likelihood is far narrower than N(μ, v) here: plain 150-point Gauss–Hermite is off by
    # 5e-3 in the first case; quadrature about the mode with the default 32 points is not.
    lik = Poisson()
    cases = [(0.0, 1.0, 50.0), (-10.0, 0.01, 100.0), (2.0, 1.0, 0.0), (1.0, 0.3, 3.0), (-3.0, 4.0, 5.0)]
    mu, v, y = (t(list(c)) for c in zip(*cases))
    pld = lik.predict_log_density(mu, v, y)
    log_Z = lik.tilted_moments(mu, v, y, 0.5)[0]
    for i, (mi, vi, yi) in enumerate(cases):
        ref = scipy_log_Z(lik, mi, vi, yi)
        assert abs(float(pld[i]) - ref) < 1e-9 * (1 + abs(ref)), (cases[i], float(pld[i]), ref)
        ref = scipy_log_Z(lik, mi, vi, yi, 0.5)
        assert abs(float(log_Z[i]) - ref) < 1e-9 * (1 + abs(ref)), (cases[i], float(log_Z[i]), ref)
    plain = Likelihood.predict_log_density(Poisson(quadrature_points=150), mu, v, y)
    assert abs(float(plain[0] - pld[0])) > 1e-3  # why the adaptive rule is needed


def test_poisson_closed_forms_against_formulas():
    lik = Poisson()
    m, v, y = t([0.3, -2.0]), t([0.5, 1.0]), t([3.0, 0.0])
    expected = y * m - torch.exp(m + v / 2) - torch.lgamma(y + 1)
    torch.testing.assert_close(lik.variational_expectations(m, v, y), expected, rtol=0, atol=1e-14)
    mean, var = lik.predict_mean_and_var(m, v)
    torch.testing.assert_close(var, mean + (torch.exp(v) - 1) * torch.exp(2 * m + v))
    np.testing.assert_allclose(lik.log_prob(t([0.7]), t([4.0])).numpy(),
                               stats.poisson.logpmf(4, math.exp(0.7)), rtol=1e-13)


# -- Bernoulli against Monte Carlo ----------------------------------------------------------
MC_CASES = ([0.8, -1.5, 0.0, 3.0], [1.5, 0.3, 4.0, 0.8], [1.0, 1.0, 0.0, 0.0])


@pytest.mark.parametrize("link", ["probit", "logit"])
def test_bernoulli_variational_expectations_match_monte_carlo(link):
    lik = Bernoulli(link)
    m, v, y = (t(a) for a in MC_CASES)
    ve = lik.variational_expectations(m, v, y)
    gen = torch.Generator().manual_seed(11)
    z = torch.randn(2_000_000, 1, generator=gen, dtype=F64)
    samples = lik.log_prob(m + v.sqrt() * z, y)  # [S, N]
    se = samples.std(0) / math.sqrt(z.shape[0])
    err = (ve - samples.mean(0)).abs()
    assert bool((err < 4 * se).all()), (err, se)
    assert float(se.max()) < 2.5e-3  # the check has teeth: errors of 1e-2 would be caught


def test_bernoulli_probit_predictive_closed_form_against_quadrature_and_monte_carlo():
    lik = Bernoulli("probit")
    m, v, y = (t(a) for a in MC_CASES)
    p, pv = lik.predict_mean_and_var(m, v)
    q, qv = Likelihood.predict_mean_and_var(lik, m, v)
    torch.testing.assert_close(p, q, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(pv, qv, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(pv, p * (1 - p))
    z = torch.randn(2_000_000, 1, generator=torch.Generator().manual_seed(12), dtype=F64)
    phi = torch.special.ndtr(m + v.sqrt() * z)
    assert bool(((p - phi.mean(0)).abs() < 4 * phi.std(0) / math.sqrt(z.shape[0])).all())
    torch.testing.assert_close(lik.predict_log_density(m, v, y),
                               Likelihood.predict_log_density(lik, m, v, y), rtol=1e-10, atol=1e-12)


# -- Power-EP tilted moments ----------------------------------------------------------------
SINGLE = {
    "gaussian": (Gaussian(variance=0.3), [(0.4, 0.7, 1.2), (-1.0, 2.0, 0.5)]),
    "probit": (Bernoulli("probit"), [(0.8, 1.5, 1.0), (-2.0, 0.5, 1.0), (1.0, 3.0, 0.0)]),
    "logit": (Bernoulli("logit"), [(0.8, 1.5, 1.0), (-2.0, 0.5, 1.0), (1.0, 3.0, 0.0)]),
    "poisson": (Poisson(), [(0.3, 0.5, 3.0), (-0.5, 0.3, 0.0), (1.0, 0.2, 5.0)]),
}


@pytest.mark.parametrize("alpha", [1.0, 0.5, 0.1])
@pytest.mark.parametrize("name", list(SINGLE))
def test_tilted_moments_against_scipy_and_finite_differences(name, alpha):
    # Closed forms (Gaussian; probit at α = 1) to 1e-10 in log Z̃ and 1e-8 in d1, d2 (the finite
    # differences' own error is ~1e-9); 32-point quadrature to 1e-7 and 1e-6 (measured ≤ 1.1e-7).
    lik, cases = SINGLE[name]
    closed = name == "gaussian" or (name == "probit" and alpha == 1.0)
    tol_Z, tol_d = (1e-10, 1e-8) if closed else (1e-7, 1e-6)
    mu, v, y = (t(list(c)) for c in zip(*cases))
    log_Z, d1, d2 = (a.detach() for a in lik.tilted_moments(mu, v, y, alpha))
    h = 1e-3
    for i in range(len(cases)):
        mi, vi, yi = cases[i]
        ref = [scipy_log_Z(lik, mi + k * h, vi, yi, alpha) for k in (-2, -1, 0, 1, 2)]
        assert abs(float(log_Z[i]) - ref[2]) < tol_Z * (1 + abs(ref[2]))
        fd1 = (ref[0] - 8 * ref[1] + 8 * ref[3] - ref[4]) / (12 * h)  # O(h⁴)
        fd2 = (-ref[0] + 16 * ref[1] - 30 * ref[2] + 16 * ref[3] - ref[4]) / (12 * h * h)
        assert abs(float(d1[i]) - fd1) < tol_d * (1 + abs(fd1)), (float(d1[i]), fd1)
        assert abs(float(d2[i]) - fd2) < tol_d * (1 + abs(fd2)), (float(d2[i]), fd2)
        assert float(d2[i]) < 0  # log-concave likelihoods: the tilted variance shrinks


@pytest.mark.parametrize("name", list(SINGLE))
def test_autograd_through_tilted_log_normaliser_equals_d1(name):
    # the models differentiate log Z̃ (energy) and use d1, d2 (site updates): they must agree
    lik, cases = SINGLE[name]
    mu, v, y = (t(list(c)) for c in zip(*cases))
    mu.requires_grad_(True)
    log_Z, d1, _ = lik.tilted_moments(mu, v, y, 0.5)
    (grad,) = torch.autograd.grad(log_Z.sum(), mu)
    torch.testing.assert_close(grad, d1.detach(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("link", ["softmax", "robustmax"])
def test_multiclass_expectations_pass_gradcheck(link):
    m, v, y = multiclass_inputs(C=3, N=4, seed=9)
    lik = MultiClass(3, link, num_samples=64)
    m.requires_grad_(True)
    v.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, b: lik.variational_expectations(a, b, y), (m, v))
    assert torch.autograd.gradcheck(lambda a, b: lik.predict_log_density(a, b, y), (m, v))


def test_poisson_predictive_density_passes_gradcheck():
    m, v, y = t([0.3, -1.0, 2.0]), t([0.5, 1.0, 0.2]), t([3.0, 0.0, 9.0])
    m.requires_grad_(True)
    v.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, b: Poisson().predict_log_density(a, b, y), (m, v), atol=1e-6)


@pytest.mark.parametrize("alpha", [1.0, 0.5, 0.1])
def test_gaussian_tilted_closed_form_equals_quadrature(alpha):
    lik, ref = Gaussian(variance=0.3), Gaussian(variance=0.3, quadrature_points=100)  # σ² < v: 100 points
    mu, v, y = t([0.4, -1.0, 2.0]), t([0.7, 2.0, 0.01]), t([1.2, 0.5, 2.1])
    for a, b in zip(lik.tilted_moments(mu, v, y, alpha), Likelihood.tilted_moments(ref, mu, v, y, alpha)):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


def test_probit_tilted_closed_form_equals_quadrature():
    lik, ref = Bernoulli("probit"), Bernoulli("probit", quadrature_points=100)
    mu, v, y = t([0.8, -2.0, 1.0, 0.0]), t([1.5, 0.5, 3.0, 0.1]), t([1.0, 1.0, 0.0, 0.0])
    for a, b in zip(lik.tilted_moments(mu, v, y, 1.0), Likelihood.tilted_moments(ref, mu, v, y, 1.0)):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


def scipy_probit_tilted(mu: float, v: float, y: float) -> tuple[float, float, float]:
    """log Z, d1 = Z'/Z, d2 = Z''/Z − d1² with Z^(k) = E[∂^k Φ(s f)] (Stein's lemma), by scipy
    quad in t = (f − μ)/√v, all three scaled by the same factor exp(−max log integrand)."""
    s, sd = 2 * y - 1, math.sqrt(v)
    grid = np.linspace(-40.0, 40.0, 160001)
    logs = log_phi(grid) + special.log_ndtr(s * (mu + sd * grid))
    top, t_max = float(logs.max()), float(grid[logs.argmax()])

    # break points at the Z integrand's maximum and around t = −μ/√v, where N(f) in Z' and Z''
    # peaks (a spike of width 1/√v in t for large v)
    near_zero = [-mu / sd + j / sd for j in (-8, -2, 0, 2, 8)]
    points = sorted({p for p in [t_max, *near_zero] if -40.0 < p < 40.0})

    def quad(fn):
        return integrate.quad(fn, -40.0, 40.0, points=points, epsabs=1e-16, epsrel=1e-12, limit=500)[0]

    Z = quad(lambda u: math.exp(log_phi(u) + special.log_ndtr(s * (mu + sd * u)) - top))
    Z1 = quad(lambda u: s * math.exp(log_phi(u) + log_phi(mu + sd * u) - top))
    Z2 = quad(lambda u: -s * (mu + sd * u) * math.exp(log_phi(u) + log_phi(mu + sd * u) - top))
    return math.log(Z) + top, Z1 / Z, Z2 / Z - (Z1 / Z) ** 2


def test_probit_tilted_closed_form_at_extreme_arguments():
    cases = [(m, v, y) for m in (-30.0, 30.0) for v in (1e-10, 1.0, 1e4) for y in (0.0, 1.0)]
    mu, v, y = (t(list(c)) for c in zip(*cases))
    log_Z, d1, d2 = Bernoulli("probit").tilted_moments(mu, v, y, 1.0)
    assert bool(torch.isfinite(torch.stack([log_Z, d1, d2])).all())
    for i, (mi, vi, yi) in enumerate(cases):
        ref = scipy_probit_tilted(mi, vi, yi)
        assert abs(float(log_Z[i]) - ref[0]) < 1e-9 * (1 + abs(ref[0])), (cases[i], float(log_Z[i]), ref)
        assert abs(float(d1[i]) - ref[1]) < 1e-8 * (1 + abs(ref[1])), (cases[i], float(d1[i]), ref)
        assert abs(float(d2[i]) - ref[2]) < 1e-7 * (1 + abs(ref[2])), (cases[i], float(d2[i]), ref)
    assert float(log_Z[cases.index((-30.0, 1e-10, 1.0))]) < -450  # Φ(−30): not clamped to a floor


# -- quadrature convergence -----------------------------------------------------------------
@pytest.mark.parametrize("make", [lambda n: Bernoulli("logit", quadrature_points=n),
                                  lambda n: Poisson(quadrature_points=n)], ids=["logit", "poisson"])
def test_quadrature_with_n_and_2n_points_agrees(make):
    # Tolerance 1e-7 (relative and absolute) at the default n = 32 for variances up to 2; the
    # largest difference (6e-8) is in ∂² log Z̃ = (ṽ − v)/v² of the Poisson at y = 1, v = 2.
    a, b = make(32), make(64)
    m, v, y = t([0.8, -1.5, 0.0, 1.2]), t([1.5, 0.3, 2.0, 0.8]), t([1.0, 0.0, 1.0, 1.0])
    for fn in (lambda L: Likelihood.variational_expectations(L, m, v, y),
               lambda L: L.predict_log_density(m, v, y),
               lambda L: torch.stack(L.predict_mean_and_var(m, v)),
               lambda L: torch.stack(L.tilted_moments(m, v, y, 0.5))):
        torch.testing.assert_close(fn(a), fn(b), rtol=1e-7, atol=1e-7)


def test_robustmax_quadrature_with_n_and_2n_points_agrees():
    # Tolerance 1e-7 at the default n = 64 (the integrand is sharp where v_j ≪ v_y).
    m, v, y = multiclass_inputs(C=4, N=6, seed=3)
    a, b = MultiClass(4, "robustmax", quadrature_points=64), MultiClass(4, "robustmax", quadrature_points=128)
    torch.testing.assert_close(a.predict_mean_and_var(m, v)[0], b.predict_mean_and_var(m, v)[0],
                               rtol=0, atol=1e-7)
    torch.testing.assert_close(a.variational_expectations(m, v, y), b.variational_expectations(m, v, y),
                               rtol=0, atol=1e-6)


# -- multi-class ----------------------------------------------------------------------------
def multiclass_inputs(C: int, N: int, seed: int, vmax: float = 1.0):
    gen = torch.Generator().manual_seed(seed)
    m = 1.5 * torch.randn(N, C, generator=gen, dtype=F64)
    v = 0.1 + (vmax - 0.1) * torch.rand(N, C, generator=gen, dtype=F64)
    y = torch.randint(0, C, (N,), generator=gen).to(F64)
    return m, v, y


def plain_mc(C: int, N: int, S: int, seed: int) -> torch.Tensor:
    return torch.randn(S, N, C, generator=torch.Generator().manual_seed(seed), dtype=F64)


def test_softmax_monte_carlo_against_a_large_independent_monte_carlo():
    C, N = 3, 6
    m, v, y = multiclass_inputs(C, N, seed=1)
    lik = MultiClass(C)
    ve, pld = lik.variational_expectations(m, v, y), lik.predict_log_density(m, v, y)
    p, pv = lik.predict_mean_and_var(m, v)
    f = m + v.sqrt() * plain_mc(C, N, 400_000, seed=5)
    logp = torch.log_softmax(f, -1).gather(-1, y.long().expand(f.shape[0], N)[..., None]).squeeze(-1)
    se = logp.std(0) / math.sqrt(f.shape[0])
    assert bool(((ve - logp.mean(0)).abs() < 4 * se + 2e-3).all())  # 2e-3: ≥ 3 sd of the QMC error
    probs = torch.softmax(f, -1)
    assert bool(((p - probs.mean(0)).abs() < 4 * probs.std(0) / math.sqrt(f.shape[0]) + 2e-3).all())
    torch.testing.assert_close(pv, p * (1 - p))
    torch.testing.assert_close(p.sum(-1), torch.ones(N, dtype=F64), rtol=0, atol=1e-13)
    # log p(y*) is the log of the same average: absolute error ~1e-4 in the probability (relative
    # error 3% for the improbable label, p = 0.004, of point 4)
    p_y = p.gather(-1, y.long()[:, None]).squeeze(-1)
    torch.testing.assert_close(pld, torch.log(p_y), rtol=1e-12, atol=0)
    p_y = probs.gather(-1, y.long().expand(f.shape[0], N)[..., None]).squeeze(-1).mean(0)
    torch.testing.assert_close(pld.exp(), p_y, rtol=0, atol=5e-4)
    # reproducible: the same seed gives the same numbers, another seed different ones
    assert torch.equal(MultiClass(C).variational_expectations(m, v, y), ve)
    assert not torch.equal(MultiClass(C, seed=1).variational_expectations(m, v, y), ve)


def test_two_class_softmax_equals_logit_bernoulli_on_the_difference():
    m, v, y = multiclass_inputs(C=2, N=8, seed=2, vmax=2.0)
    soft, logit = MultiClass(2), Bernoulli("logit", quadrature_points=64)
    d_mean, d_var = m[:, 1] - m[:, 0], v.sum(-1)  # f_1 − f_0 ~ N(m_1 − m_0, v_0 + v_1)
    # exactly comparable: p(y | f) = σ(s (f_1 − f_0)) pointwise
    f = torch.randn(5, 8, 2, generator=torch.Generator().manual_seed(0), dtype=F64) * 3
    diff = f[..., 1] - f[..., 0]
    torch.testing.assert_close(soft.log_prob(f, y), logit.log_prob(diff, y), rtol=1e-13, atol=1e-14)
    torch.testing.assert_close(soft.conditional_mean(f)[..., 1], logit.conditional_mean(diff))
    # Gaussian expectations: quasi-Monte Carlo against 1-D quadrature, within the documented error
    ve, exact = soft.variational_expectations(m, v, y), logit.variational_expectations(d_mean, d_var, y)
    assert float((ve - exact).abs().max()) < 3e-3
    assert float((ve - exact).abs().max()) > 1e-8  # (a Monte Carlo estimate, not the quadrature)
    p = soft.predict_mean_and_var(m, v)[0][:, 1]
    torch.testing.assert_close(p, logit.predict_mean_and_var(d_mean, d_var)[0], rtol=0, atol=1e-3)
    torch.testing.assert_close(soft.predict_log_density(m, v, y), logit.predict_log_density(d_mean, d_var, y),
                               rtol=0, atol=3e-3)
    # unbiased over the seed: the average of 32 independent scramblings is much closer
    avg = torch.stack([MultiClass(2, seed=s).variational_expectations(m, v, y) for s in range(32)]).mean(0)
    assert float((avg - exact).abs().max()) < 6e-4


def test_robustmax_against_monte_carlo():
    C, N, eps = 4, 6, 0.01
    m, v, y = multiclass_inputs(C, N, seed=4)
    lik = MultiClass(C, "robustmax", epsilon=eps)
    ve, pld = lik.variational_expectations(m, v, y), lik.predict_log_density(m, v, y)
    p, pv = lik.predict_mean_and_var(m, v)
    S = 1_000_000
    f = m + v.sqrt() * plain_mc(C, N, S, seed=6)
    hits = torch.nn.functional.one_hot(f.argmax(-1), C).to(F64).mean(0)  # P_c [N, C]
    se = (hits * (1 - hits) / S).sqrt()
    P_y = hits.gather(-1, y.long()[:, None]).squeeze(-1)
    hit, miss = math.log(1 - eps), math.log(eps / (C - 1))
    P_from_ve = (ve - miss) / (hit - miss)
    assert bool(((P_from_ve - P_y).abs() < 4 * se.gather(-1, y.long()[:, None]).squeeze(-1) + 1e-6).all())
    mc_probs = (1 - eps) * hits + eps / (C - 1) * (1 - hits)
    assert bool(((p - mc_probs).abs() < 4 * se + 1e-6).all())
    torch.testing.assert_close(pv, p * (1 - p))
    torch.testing.assert_close(p.sum(-1), torch.ones(N, dtype=F64), rtol=0, atol=1e-8)
    p_y = p.gather(-1, y.long()[:, None]).squeeze(-1)
    torch.testing.assert_close(pld, torch.log(p_y), rtol=1e-12, atol=0)
    lp = lik.log_prob(f[:1000], y)  # p(y | f) takes two values only, as the arg-max says
    is_max = f[:1000].argmax(-1) == y.long()
    torch.testing.assert_close(lp, torch.where(is_max, t(hit), t(miss)), rtol=1e-14, atol=0)


def test_multiclass_shapes_dtype_and_leading_dimensions():
    m, v, y = multiclass_inputs(C=3, N=5, seed=7)
    for link in ("softmax", "robustmax"):
        lik = MultiClass(3, link)
        ve = lik.variational_expectations(m, v, y)
        stacked = lik.variational_expectations(m.expand(2, 5, 3), v.expand(2, 5, 3), y)
        assert stacked.shape == (2, 5)
        torch.testing.assert_close(stacked[1], ve)
        assert lik.variational_expectations(m.float(), v.float(), y).dtype == torch.float32
        assert lik.predict_mean_and_var(m, v)[0].shape == (5, 3)
    assert Poisson().variational_expectations(m[:, 0].float(), v[:, 0].float(), y).dtype == torch.float32


def test_multiclass_refuses_power_ep():
    with pytest.raises(TypeError, match="single-latent"):
        MultiClass(3).tilted_moments(t([[0.0, 1.0, 2.0]]), t([[1.0, 1.0, 1.0]]), t([0.0]), 0.5)


# -- labels ---------------------------------------------------------------------------------
def test_bad_labels_raise_value_errors_naming_the_values():
    with pytest.raises(ValueError, match=r"offending: 2$"):
        Bernoulli().check_targets(t([0.0, 1.0, 2.0]))
    torch.testing.assert_close(Bernoulli().check_targets(t([-1.0, 1.0])), t([0.0, 1.0]))
    with pytest.raises(ValueError, match=r"-1\.0.*0\.5|0\.5.*-1\.0"):
        Poisson().check_targets(t([0.0, 3.0, -1.0, 0.5]))
    Poisson().check_targets(t([0.0, 3.0, 12.0]))
    with pytest.raises(ValueError, match=r"1\.5.*3\.0"):
        MultiClass(3).check_targets(t([0.0, 2.0, 3.0, 1.5]))
    with pytest.raises(ValueError, match=r"\[3\]"):
        MultiClass(3).check_targets(torch.tensor([0, 3]))
    MultiClass(3).check_targets(t([0.0, 1.0, 2.0]))


# -- persistence ----------------------------------------------------------------------------
def round_trip_cases():
    g = Gaussian(variance=0.37)
    with torch.no_grad():
        g.raw_variance.add_(1e-3)  # a trained value
    return [g, Bernoulli("logit", quadrature_points=20), Bernoulli(), Poisson(quadrature_points=40),
            MultiClass(4, num_samples=256, seed=3), MultiClass(3, "robustmax", epsilon=0.05)]


@pytest.mark.parametrize("lik", round_trip_cases(), ids=lambda lik: type(lik).__name__)
def test_config_round_trip_gives_identical_log_prob(lik):
    cfg = lik.config()
    assert json.loads(json.dumps(cfg)) == cfg  # plain Python values only
    new = likelihood_from_config(cfg)
    new.load_state_dict(lik.state_dict())
    assert type(new) is type(lik) and new.config() == cfg
    C = lik.num_latent
    m, v, y = multiclass_inputs(max(C, 2), 5, seed=8)
    if C == 1:
        m, v, y = m[:, 0], v[:, 0], (y > 0).to(F64)
    assert torch.equal(new.log_prob(m, y), lik.log_prob(m, y))
    assert torch.equal(new.variational_expectations(m, v, y), lik.variational_expectations(m, v, y))


def test_unknown_likelihood_type_is_a_clear_error():
    with pytest.raises(ValueError,
                       match="unknown likelihood type 'Skellam'.*Bernoulli, Beta, Gamma, Gaussian"):
        likelihood_from_config({"type": "Skellam", "args": {}})
    with pytest.raises(ValueError, match="bad arguments"):
        likelihood_from_config({"type": "Poisson", "args": {"link": "sqrt"}})

    class Exponential(Likelihood):  # subclasses register themselves; rate exp(f)
        def log_prob(self, f, y):
            return f - y * torch.exp(f)

        def conditional_mean(self, f):
            return torch.exp(-f)

        def conditional_variance(self, f):
            return torch.exp(-2 * f)

    assert isinstance(likelihood_from_config(Exponential().config()), Exponential)
