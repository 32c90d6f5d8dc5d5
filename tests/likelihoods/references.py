"""Independent references the likelihood tests share: adaptive quadrature under a normal, the
tilted moments of Power EP by quadrature, finite-difference gradients of a likelihood's
expectations in its parameters and in the moments of f, and Power EP's small-α limit."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import pytest
import torch
from scipy import integrate, optimize

from ..conformance.helpers import gradcheck_through


def normal_logpdf(f: float, mu: float, sd: float) -> float:
    """log N(f; μ, sd²), written out: scipy.stats' per-call overhead is 20× the arithmetic
    and the quadrature references call it ~10⁵ times."""
    z = (f - mu) / sd
    return -0.5 * z * z - math.log(sd) - 0.5 * math.log(2.0 * math.pi)


def quad_under_normal(fn: Callable[[float], float], mu: float, v: float, peak: float,
                      width: float = 40.0) -> float:
    """∫ fn(f) N(f; μ, v) df by adaptive quadrature over μ ± `width` sds, split at the
    likelihood's peak."""
    sd = math.sqrt(v)
    lo, hi = mu - width * sd, mu + width * sd
    points = [peak] if lo < peak < hi else None
    value, _ = integrate.quad(lambda f: fn(f) * math.exp(normal_logpdf(f, mu, sd)), lo, hi,
                              points=points, limit=500, epsabs=1e-13, epsrel=1e-13)
    return value


def tilted_reference(log_lik: Callable[[float], float], mu: float, v: float, alpha: float,
                     bracket: tuple[float, float], width: float = 40.0
                     ) -> tuple[float, float, float]:
    """log Z̃ = log ∫ N(f; μ, v) p^α df, (m̃ − μ)/v and (ṽ − v)/v² by adaptive quadrature of
    the integrand scaled by its value at its mode (found in `bracket`), over the mode ±
    `width` sds, so that it stays accurate where Z̃ is tiny."""
    sd = math.sqrt(v)

    def log_g(f: float) -> float:
        return alpha * log_lik(f) + normal_logpdf(f, mu, sd)

    lo, hi = min(bracket), max(bracket)
    mode = optimize.minimize_scalar(lambda f: -log_g(f), bounds=(lo - 1e-9, hi + 1e-9),
                                    method="bounded", options={"xatol": 1e-12}).x
    top = log_g(mode)

    def q(fn: Callable[[float], float]) -> float:
        return integrate.quad(lambda f: fn(f) * math.exp(log_g(f) - top), mode - width * sd,
                              mode + width * sd, points=[mode], limit=500, epsabs=1e-14,
                              epsrel=1e-13)[0]

    Z = q(lambda f: 1.0)
    m1 = q(lambda f: f - mu) / Z
    m2 = q(lambda f: (f - mu - m1) ** 2) / Z
    return math.log(Z) + top, m1 / v, (m2 - v) / v**2


def expectations_gradcheck(lik: torch.nn.Module, mean: torch.Tensor, var: torch.Tensor,
                           y: torch.Tensor, extra: Iterable[Callable] = ()) -> None:
    """Autograd against central differences, in every parameter of `lik` and in the mean and
    variance of f, for the variational expectation, the predictive density, Power EP's log Z̃
    (α = 0.5), the predictive variance and the log density (and `extra` functions of m, v)."""
    for fn in (lambda m, v: lik.variational_expectations(m, v, y),
               lambda m, v: lik.predict_log_density(m, v, y),
               lambda m, v: lik.tilted_moments(m, v, y, 0.5)[0],
               lambda m, v: lik.predict_mean_and_var(m, v)[1],
               lambda m, v: lik.log_prob(m, y), *extra):
        assert gradcheck_through([lik], fn, [mean, var], atol=1e-7, rtol=1e-6)


#: The (mean, variance) pairs of f the predictive-moment checks use.
MOMENT_CASES = [(0.0, 0.3), (1.2, 1.0), (-0.5, 2.0)]


def check_predictive_moments(lik: torch.nn.Module, first: Callable[[float], float],
                             second: Callable[[float], float], rtol: float, atol: float = 0.0,
                             width: float = 40.0) -> None:
    """`predict_mean_and_var` against quadrature: E[y*] = E_f[first(f)] and
    Var[y*] = E_f[second(f)] − E[y*]², with `first` (`second`) the mean (second moment) of y
    given f, for each (μ, v) of `MOMENT_CASES`."""
    mean = torch.tensor([c[0] for c in MOMENT_CASES], dtype=torch.float64)
    var = torch.tensor([c[1] for c in MOMENT_CASES], dtype=torch.float64)
    with torch.no_grad():
        Ey, Vy = lik.predict_mean_and_var(mean, var)
    for j, (mu, v) in enumerate(MOMENT_CASES):
        m1 = quad_under_normal(first, mu, v, mu, width)
        m2 = quad_under_normal(second, mu, v, mu, width)
        assert abs(float(Ey[j]) - m1) <= rtol * abs(m1) + atol
        assert abs(float(Vy[j]) - (m2 - m1**2)) <= rtol * abs(m2 - m1**2) + atol


def small_alpha_gaps(sgpc: Callable[[float], torch.nn.Module], svgp: Callable[[], torch.nn.Module],
                     alphas: Iterable[float] = (1e-1, 1e-2, 1e-3)) -> list[float]:
    """Power EP's energy minus the SVGP ELBO of the same q(u), for SGPCs at each α: `sgpc(α)`
    builds the SGPC (its sites converged here), `svgp()` the SVGP (whiten=False) that takes
    the SGPC's q(u). As α → 0 Power EP's energy tends to the ELBO, the gap shrinking as O(α)
    (`check_gaps_shrink_as_alpha`)."""
    gaps = []
    for alpha in alphas:
        model: Any = sgpc(alpha)
        model.update_sites(max_sweeps=3000, tol=1e-13)
        post = model.posterior()
        sv: Any = svgp()
        with torch.no_grad():
            sv.q_mu.copy_(post.q_mu)  # q(u) in u-space, [M, C] and [C, M, M], on every posterior
            sv.q_sqrt.copy_(torch.linalg.cholesky(post.q_cov))
        gaps.append(model.log_marginal_likelihood() - sv.log_marginal_likelihood())
    return gaps


def same_q_gaps(X: Any, y: Any, Z: Any, likelihood: Callable[[], Any]) -> list[float]:
    """`small_alpha_gaps` of SGPCs and the SVGP on (X, y) with inducing inputs Z, a unit
    squared-exponential kernel and `likelihood()`."""
    import sparsegp as sg

    def kernel() -> Any:
        return sg.kernels.SquaredExponential(lengthscale=1.0, variance=1.0)

    return small_alpha_gaps(
        lambda alpha: sg.SGPC(X, y, kernel=kernel(), inducing_points=Z, alpha=alpha,
                              likelihood=likelihood()),
        lambda: sg.SVGP(X, y, kernel=kernel(), likelihood=likelihood(), inducing_points=Z,
                        whiten=False))


def check_gaps_shrink_as_alpha(gaps: list[float]) -> None:
    """The gaps at α = 0.1, 0.01, 0.001: small at the last, shrinking tenfold per step."""
    assert abs(gaps[-1]) < 0.02
    assert abs(gaps[0]) > abs(gaps[1]) > abs(gaps[2])
    assert abs(gaps[1] / gaps[2]) == pytest.approx(10.0, rel=0.3)  # O(α)
