"""A dense Power-EP reference for every single-latent likelihood: plain sequential EP on the
full N×N prior covariance K (Rasmussen & Williams 2006, Alg. 3.5, with Minka's power α:
Minka 2004; Bui, Yan & Turner 2017, §3), its tilted moments by adaptive quadrature
(`scipy.integrate.quad_vec`, adaptive Gauss–Kronrod) and its log-likelihoods written from
the distributions' densities with scipy's special functions — none of it shares code with
the library's Gauss–Hermite quadrature or its site updates.

Sites t_n(f) = exp(ν_n f − ½ τ_n f²); posterior Σ = (K⁻¹ + diag τ)⁻¹, μ = Σν; cavity
1/s_c = 1/Σ_nn − ατ_n, μ_c = s_c(μ_n/Σ_nn − αν_n); the tilted distribution
N(f; μ_c, s_c) p(y_n | f)^α has normaliser Z̃_n, mean m̃ and variance ṽ, and the new site
matches them: ατ_n = 1/ṽ − 1/s_c, αν_n = m̃/ṽ − μ_c/s_c. The energy (approximate log p(y)) is

    log ∫ N(f; 0, K) Π t_n(f) df + (1/α) Σ_n [log Z̃_n − log ∫ N(f; μ_c, s_c) t_n(f)^α df].
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import integrate, special

LogLik = Callable[[np.ndarray], np.ndarray]  # f -> log p(y_n | f), elementwise


# -- log-likelihoods of one target, from the densities ------------------------------------
def bernoulli(y: float, link: str = "probit") -> LogLik:
    s = 2.0 * y - 1.0
    if link == "probit":
        return lambda f: special.log_ndtr(s * f)
    return lambda f: -np.logaddexp(0.0, -s * f)


def poisson(y: float) -> LogLik:
    return lambda f: y * f - np.exp(f) - special.gammaln(y + 1.0)


def student_t(y: float, df: float, scale: float) -> LogLik:
    c = (special.gammaln(0.5 * (df + 1.0)) - special.gammaln(0.5 * df)
         - 0.5 * math.log(math.pi * df) - math.log(scale))
    return lambda f: c - 0.5 * (df + 1.0) * np.log1p(((y - f) / scale) ** 2 / df)


def negative_binomial(y: float, r: float) -> LogLik:
    """NB(y | r, p = r/(r + e^f)): log p = log Γ(y + r) − log Γ(r) − log y! + r log p
    + y log(1 − p)."""
    c = special.gammaln(y + r) - special.gammaln(r) - special.gammaln(y + 1.0)

    def log_p(f: np.ndarray) -> np.ndarray:
        log_total = np.logaddexp(math.log(r), f)  # log(r + μ)
        return c + r * (math.log(r) - log_total) + y * (f - log_total)
    return log_p


def gamma(y: float, k: float) -> LogLik:
    """Gamma(y | shape k, scale e^f/k)."""
    c = k * math.log(k) - special.gammaln(k) + (k - 1.0) * math.log(y)
    return lambda f: c - k * f - k * y * np.exp(-f)


def beta(y: float, phi: float) -> LogLik:
    """Beta(y | μφ, (1 − μ)φ), μ = 1/(1 + e^(−f))."""
    def log_p(f: np.ndarray) -> np.ndarray:
        a, b = special.expit(f) * phi, special.expit(-f) * phi
        return (special.gammaln(phi) - special.gammaln(a) - special.gammaln(b)
                + (a - 1.0) * math.log(y) + (b - 1.0) * math.log1p(-y))
    return log_p


def ordinal(y: int, cuts: Sequence[float], scale: float) -> LogLik:
    """Probit ordinal: Φ((c_y+1 − f)/σ) − Φ((c_y − f)/σ), the difference taken in the tail
    where it is small."""
    c = [-np.inf, *cuts, np.inf]

    def log_p(f: np.ndarray) -> np.ndarray:
        hi, lo = (c[y + 1] - f) / scale, (c[y] - f) / scale
        upper = lo + hi > 0  # Φ(hi) − Φ(lo) = Φ(−lo) − Φ(−hi)
        top = special.log_ndtr(np.where(upper, -lo, hi))
        bottom = special.log_ndtr(np.where(upper, -hi, lo))
        with np.errstate(divide="ignore"):
            return top + np.log1p(-np.exp(bottom - top))
    return log_p


# -- tilted moments by adaptive quadrature ------------------------------------------------
def tilted(log_lik: LogLik, mu: float, v: float, alpha: float,
           points: Sequence[float] = ()) -> tuple[float, float, float]:
    """log Z̃ = log ∫ N(f; μ, v) p(y | f)^α df, the tilted mean and variance, by adaptive
    Gauss–Kronrod quadrature (absolute and relative tolerance 1e-12) of the integrand scaled
    by its largest value, over [min(mode, μ) − 20√v, max(mode, μ) + 20√v] (beyond, the prior
    factor is below e^(−200)) split at the mode,
    μ and `points` (a likelihood's kinks or second mode). The mode is the largest of the
    integrand on a grid of 2001 points over μ ± 60√v (and `points`), refined by golden
    section between its neighbours."""
    sd = math.sqrt(v)

    def log_g(f: np.ndarray) -> np.ndarray:
        value = alpha * log_lik(f) - 0.5 * (f - mu) ** 2 / v
        return np.where(np.isnan(value), -np.inf, value)

    grid = np.concatenate([mu + sd * np.linspace(-60.0, 60.0, 2001), np.asarray(points, float)])
    values = log_g(grid)
    best = int(np.argmax(values))
    step = 120.0 * sd / 2000
    a, b = grid[best] - step, grid[best] + step
    ratio = (math.sqrt(5.0) - 1.0) / 2.0
    for _ in range(40):  # golden section on [a, b], to 1e-8 of its width
        c, d = b - ratio * (b - a), a + ratio * (b - a)
        if log_g(np.array(c)) > log_g(np.array(d)):
            b = d
        else:
            a = c
    mode = 0.5 * (a + b)
    top = float(log_g(np.array(mode)))
    lo, hi = min(mode, mu) - 20.0 * sd, max(mode, mu) + 20.0 * sd
    cuts = sorted({lo, mode, mu, hi, *[p for p in points if lo < p < hi]})

    def integrand(f: float) -> np.ndarray:
        value = alpha * float(log_lik(f)) - 0.5 * (f - mu) ** 2 / v - top  # type: ignore[arg-type]
        w = math.exp(value) if value == value else 0.0
        x = f - mode
        return np.array([w, w * x, w * x * x])

    total = np.zeros(3)
    for left, right in zip(cuts[:-1], cuts[1:]):
        if right > left:
            total += integrate.quad_vec(integrand, left, right, epsabs=1e-12, epsrel=1e-12,
                                        limit=2000)[0]
    Z, m1, m2 = total[0], total[1] / total[0], total[2] / total[0]
    log_Z = math.log(Z) + top - 0.5 * math.log(2.0 * math.pi * v)
    return log_Z, mode + m1, m2 - m1 * m1


@dataclass
class DenseEP:
    """The converged sites, the posterior marginals of f at the data and the energy."""

    tau: np.ndarray
    nu: np.ndarray
    mean: np.ndarray
    var: np.ndarray
    log_z: float
    sweeps: int


def _posterior(K: np.ndarray, tau: np.ndarray, nu: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Σ = (I + K diag τ)⁻¹ K and μ = Σν."""
    Sigma = np.linalg.solve(np.eye(len(tau)) + K * tau[None, :], K)
    Sigma = 0.5 * (Sigma + Sigma.T)
    return Sigma, Sigma @ nu


def _log_gauss_site(m: float | np.ndarray, s: float | np.ndarray, a: float | np.ndarray,
                    b: float | np.ndarray) -> float | np.ndarray:
    """log ∫ N(f; m, s) exp(b f − ½ a f²) df, by completing the square: the product has
    precision p = 1/s + a and mean (m/s + b)/p."""
    p = 1.0 / s + a
    mean = (m / s + b) / p
    return -0.5 * np.log(s * p) + 0.5 * p * mean * mean - 0.5 * m * m / s


def dense_ep(K: np.ndarray, log_liks: Sequence[LogLik], alpha: float = 1.0,
             points: Sequence[Sequence[float]] | None = None, damping: float = 1.0,
             max_sweeps: int = 500, tol: float = 1e-11) -> DenseEP:
    """Sequential (damped) Power EP with the sites in order, recomputing Σ from scratch after
    each sweep, until no site's τ or ν changes by more than `tol` (relative to 1 + |value|).
    `points[n]`: extra split points of site n's quadrature. Raises if an update would give a
    non-positive site precision or an invalid cavity (choose data where it does not)."""
    N = K.shape[0]
    points = points if points is not None else [()] * N
    tau, nu = np.zeros(N), np.zeros(N)
    Sigma, mu = _posterior(K, tau, nu)
    sweeps = 0
    for sweeps in range(1, max_sweeps + 1):  # noqa: B007 (the count is returned)
        old_tau, old_nu = tau.copy(), nu.copy()
        for i in range(N):
            prec_c = 1.0 / Sigma[i, i] - alpha * tau[i]
            if prec_c <= 0:
                raise ArithmeticError(f"site {i}: invalid cavity")
            s_c = 1.0 / prec_c
            mu_c = s_c * (mu[i] / Sigma[i, i] - alpha * nu[i])
            _, m_t, v_t = tilted(log_liks[i], mu_c, s_c, alpha, points[i])
            new_tau = (1.0 / v_t - 1.0 / s_c) / alpha
            if new_tau <= 0:
                raise ArithmeticError(f"site {i}: non-positive site precision {new_tau}")
            new_nu = (m_t / v_t - mu_c / s_c) / alpha
            new_tau = (1.0 - damping) * tau[i] + damping * new_tau
            new_nu = (1.0 - damping) * nu[i] + damping * new_nu
            d_tau = new_tau - tau[i]
            si = Sigma[:, i].copy()
            Sigma = Sigma - d_tau / (1.0 + d_tau * si[i]) * np.outer(si, si)
            tau[i], nu[i] = new_tau, new_nu
            mu = Sigma @ nu
        Sigma, mu = _posterior(K, tau, nu)
        change = max(np.max(np.abs(tau - old_tau) / (1.0 + np.abs(tau))),
                     np.max(np.abs(nu - old_nu) / (1.0 + np.abs(nu))))
        if change < tol:
            break
    return DenseEP(tau, nu, mu, np.diag(Sigma).copy(),
                   energy(K, log_liks, tau, nu, alpha, points), sweeps)


def energy(K: np.ndarray, log_liks: Sequence[LogLik], tau: np.ndarray, nu: np.ndarray,
           alpha: float, points: Sequence[Sequence[float]] | None = None) -> float:
    """log ∫ N(f; 0, K) Π t_n df + (1/α) Σ_n [log Z̃_n − log ∫ N(f; μ_c, s_c) t_n^α df]; the
    first term is −½ log|I + K diag τ| + ½ νᵀΣν."""
    N = K.shape[0]
    points = points if points is not None else [()] * N
    Sigma, mu = _posterior(K, tau, nu)
    sign, log_det = np.linalg.slogdet(np.eye(N) + K * tau[None, :])
    assert sign > 0
    total = -0.5 * log_det + 0.5 * nu @ Sigma @ nu
    d = np.diag(Sigma)
    s_c = 1.0 / (1.0 / d - alpha * tau)
    mu_c = s_c * (mu / d - alpha * nu)
    for i in range(N):
        log_Z = tilted(log_liks[i], mu_c[i], s_c[i], alpha, points[i])[0]
        total += (log_Z - float(_log_gauss_site(mu_c[i], s_c[i], alpha * tau[i],
                                                alpha * nu[i]))) / alpha
    return float(total)
