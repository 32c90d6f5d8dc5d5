"""Proportions: p(y | f) = Beta(y | μφ, (1 − μ)φ), mean μ = σ(f) (logit) or Φ(f) (probit)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.nn.functional import logsigmoid

from ..parameters import UserValue
from ..runtime.config import POSITIVE_FLOOR
from ..validation import ArrayLike
from .base import LOG_SQRT_2PI, Likelihood
from .counts import CountLikelihood, bracketed_root

LINKS = ("logit", "probit")

#: Iterations (at most) of the safeguarded Newton searches for the likelihood's peak and the
#: mode of N(f; μ, v) p(y | f)^α.
NEWTON_ITERATIONS = 80

#: Gauss–Hermite points by default: the class docstring gives the measured accuracy (32 points
#: err by up to 8e-5 in the variational expectation at φ = 200, v = 4).
DEFAULT_POINTS = 100

#: The search for the likelihood's peak in f stays within ±PEAK_BOUND (the mean μ within
#: 1e-15 of 0 or 1: targets nearer to 0 or 1 than that put the peak at the bound).
PEAK_BOUND = 35.0


class Beta(CountLikelihood, Likelihood):
    """p(y | f) = Γ(φ)/(Γ(μφ) Γ((1 − μ)φ)) y^(μφ − 1) (1 − y)^((1 − μ)φ − 1) for proportions
    0 < y < 1, with mean μ = σ(f) (``link="logit"``, the default) or Φ(f) (``"probit"``) and
    variance μ(1 − μ)/(1 + φ); the `precision` φ (GPflow's `scale`) is a learned positive
    parameter floored at `POSITIVE_FLOOR`. In scipy's terms it is `beta(μφ, (1 − μ)φ)`.
    Shapes: f, mean, var [..., N], y [N] -> [..., N].

    `variational_expectations` has no closed form: Gauss–Hermite quadrature of `log_prob` with
    `quadrature_points` (100 by default: `DEFAULT_POINTS`). Measured against adaptive
    quadrature (scipy.integrate.quad), φ ∈ [0.5, 200], m ∈ [−3, 2], v ∈ [0.01, 4],
    y ∈ [0.01, 0.99]: absolute error ≤ 1e-10 (logit); relative error ≤ 1e-7 (probit, whose
    log p grows quadratically in the tails: 5e-6 on the value −57.9 at φ = 200, m = −3,
    v = 4, y = 0.01); with 32 points up to 8e-5 (logit, φ = 200, v = 4: log p is then
    sharply curved at its peak). The
    predictive density and Power EP's tilted moments (`SGPC`) use Gauss–Hermite quadrature
    centred on the mode of N(f; μ, v) p(y | f)^α with its Laplace width, as `Poisson` does;
    every mode lies between μ and the likelihood's peak (log p rises towards its peak and
    falls beyond it), found by a safeguarded Newton search: log Z̃ and its two derivatives
    within 2e-7 (relative to 1 + |value|) for φ ≤ 50, and for φ = 500 with v ≥ 0.5. log p is
    not concave in f: its curvature turns positive, up to about 0.65φ, where the mean μ is far
    from y. So a sharp prior there under a large φ (measured: v = 0.01, m = −3, y = 0.99,
    φ = 500) gives a tilted distribution of two modes, and the quadrature about one of them
    errs by up to 0.3. Under `SGPC` such a site update, whose precision would turn negative,
    is skipped and counted in `fit().info["skipped_updates"]`.

    Predictions of y*: by Gauss–Hermite quadrature of E[μ] and E[μ(1 − μ)/(1 + φ) + μ²].

    Example:

        >>> import numpy as np, torch, sparsegp as sg
        >>> lik = sg.likelihoods.Beta(precision=9.0)
        >>> mean, var = torch.zeros(2, dtype=torch.float64), torch.zeros(2, dtype=torch.float64)
        >>> [round(x, 6) for x in lik.predict_mean_and_var(mean, var)[1].tolist()]  # ¼/(1 + φ)
        [0.025, 0.025]
        >>> X = np.linspace(0, 1, 30)[:, None]
        >>> m = sg.SVGP(X, 0.2 + 0.6 * X[:, 0], likelihood=lik, inducing_points=5)
        >>> p = m.predict_y(X[:4])[0]
        >>> bool(((p > 0) & (p < 1)).all())
        True
    """

    # the curvature of log p grows with the learned precision φ
    bounded_curvature = False

    def __init__(self, precision: ArrayLike = 1.0, link: str = "logit",
                 quadrature_points: int = DEFAULT_POINTS) -> None:
        super().__init__(quadrature_points)
        if link not in LINKS:
            raise ValueError(f"link must be one of {LINKS}; got {link!r}")
        self.link = link
        self._add_positive("precision", precision, POSITIVE_FLOOR, max_dim=0)

    def _structure(self) -> dict[str, Any]:
        return {"link": self.link, **super()._structure()}

    precision = UserValue("The precision φ (Var[y | f] = μ(1 − μ)/(1 + φ)).")

    def latent_start(self, y: Tensor) -> Tensor:
        """The link's inverse at y: logit(y) or Φ⁻¹(y)."""
        y = y.to(torch.float64)
        return torch.logit(y) if self.link == "logit" else torch.special.ndtri(y)

    def check_targets(self, y: Tensor) -> Tensor:
        """Targets [N] must lie strictly between 0 and 1; returned unchanged."""
        bad = y[~torch.isfinite(y) | (y <= 0) | (y >= 1)]
        if bad.numel():
            values = torch.unique(bad).tolist()
            raise ValueError(f"Beta targets must be proportions strictly between 0 and 1 "
                             f"(0 < y < 1); got {bad.numel()} offending values, e.g. {values[:10]}")
        return y

    def _means(self, f: Tensor) -> tuple[Tensor, Tensor]:
        """μ and 1 − μ, each computed directly (no cancellation in the tails)."""
        if self.link == "logit":
            return torch.sigmoid(f), torch.sigmoid(-f)
        # exp(log Φ): torch's ndtr loses its relative precision below f ≈ −8 (0 at −8.3)
        return torch.exp(torch.special.log_ndtr(f)), torch.exp(torch.special.log_ndtr(-f))

    def _log_means(self, f: Tensor) -> tuple[Tensor, Tensor]:
        """log μ and log(1 − μ)."""
        if self.link == "logit":
            return logsigmoid(f), logsigmoid(-f)
        return torch.special.log_ndtr(f), torch.special.log_ndtr(-f)

    def log_prob(self, f: Tensor, y: Tensor) -> Tensor:
        """log Γ(φ) − log Γ(μφ) − log Γ((1 − μ)φ) + (μφ − 1) log y + ((1 − μ)φ − 1) log(1 − y),
        with log Γ(a) = log Γ(a + 1) − log a, log a = log μ + log φ: finite where μφ underflows."""
        phi = self.value("precision").to(f.dtype)
        y = y.to(f.dtype)
        log_mu, log_nu = self._log_means(f)
        log_phi = torch.log(phi)
        a, b = torch.exp(log_mu) * phi, torch.exp(log_nu) * phi
        log_gamma_a = torch.lgamma(a + 1.0) - (log_mu + log_phi)
        log_gamma_b = torch.lgamma(b + 1.0) - (log_nu + log_phi)
        return (torch.lgamma(phi) - log_gamma_a - log_gamma_b
                + (a - 1.0) * torch.log(y) + (b - 1.0) * torch.log1p(-y))

    def conditional_mean(self, f: Tensor) -> Tensor:
        """E[y | f] = μ."""
        return self._means(f)[0]

    def conditional_variance(self, f: Tensor) -> Tensor:
        """Var[y | f] = μ(1 − μ)/(1 + φ)."""
        mu, nu = self._means(f)
        return mu * nu / (1.0 + self.value("precision").to(f.dtype))

    def _slopes(self, f: Tensor, y: Tensor, phi: Tensor) -> tuple[Tensor, Tensor]:
        """∂ log p/∂f = φμ'T and ∂² log p/∂f² = φμ''T − φ²μ'²(ψ'(μφ) + ψ'((1 − μ)φ)),
        T = log(y/(1 − y)) − ψ(μφ) + ψ((1 − μ)φ)."""
        mu, nu = self._means(f)
        if self.link == "logit":
            d1, d2 = mu * nu, mu * nu * (nu - mu)
        else:
            d1 = torch.exp(-0.5 * f * f - LOG_SQRT_2PI)
            d2 = -f * d1
        a, b = mu * phi, nu * phi
        T = torch.log(y) - torch.log1p(-y) - torch.digamma(a) + torch.digamma(b)
        trigamma = torch.polygamma(1, a) + torch.polygamma(1, b)
        return phi * d1 * T, phi * d2 * T - phi * phi * d1 * d1 * trigamma

    def _mode_and_width(self, mean: Tensor, var: Tensor, y: Tensor, alpha: float
                        ) -> tuple[Tensor, Tensor]:
        """The likelihood's peak f* (where ∂ log p/∂f changes sign, once) by bisection, then
        the mode between μ and f* by a safeguarded Newton search; σ̂² = 1/(1/v − α ∂² log p/∂f²)
        at the mode (kept at most 1e6 v where the curvature nearly cancels)."""
        phi = self.value("precision").to(mean.dtype)
        shape = torch.broadcast_shapes(mean.shape, var.shape, y.shape)
        mu, v, yy = mean.expand(shape), var.expand(shape), y.expand(shape)
        low, high = torch.full_like(mu, -PEAK_BOUND), torch.full_like(mu, PEAK_BOUND)
        for _ in range(NEWTON_ITERATIONS):  # bisection: ∂ log p/∂f falls through 0 once
            mid = 0.5 * (low + high)
            rising = self._slopes(mid, yy, phi)[0] > 0.0
            low, high = torch.where(rising, mid, low), torch.where(rising, high, mid)
        peak = 0.5 * (low + high)

        def h_and_slope(f: Tensor) -> tuple[Tensor, Tensor]:  # the mode is a root of h
            g1, g2 = self._slopes(f, yy, phi)
            return (f - mu) / v - alpha * g1, 1.0 / v - alpha * g2

        f = bracketed_root(h_and_slope, torch.minimum(mu, peak), torch.maximum(mu, peak),
                           NEWTON_ITERATIONS)
        slope = h_and_slope(f)[1]
        return f, 1.0 / torch.maximum(slope, 1e-6 / v)
