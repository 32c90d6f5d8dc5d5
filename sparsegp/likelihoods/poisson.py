"""Count data: p(y | f) = Poisson(y | λ = exp(f)), the log link."""

from __future__ import annotations

import torch
from torch import Tensor

from .. import quadrature
from .base import Likelihood
from .counts import CountLikelihood

#: Newton iterations (at most) for the mode of N(f; μ, v) p(y | f)^α; each converges
#: monotonically from its starting point, quadratically near the mode.
NEWTON_ITERATIONS = 50


class Poisson(CountLikelihood, Likelihood):
    """p(y | f) = λ^y e^(−λ) / y!, λ = exp(f), for counts y ∈ {0, 1, 2, …}.

    Shapes: f, mean, var [..., N], y [N] -> [..., N]. The variational expectation and the
    predictive moments are closed forms (E[e^f] = e^(m + v/2) under N(m, v)). The predictive
    density and the Power-EP tilted moments have none; they use Gauss–Hermite quadrature
    centred on the mode of the integrand N(f; μ, v) p(y | f)^α with its Laplace width
    (adaptive Gauss–Hermite, Liu & Pierce 1994), which stays accurate for large counts where
    the likelihood is much narrower than N(μ, v). Measured relative error of the predictive
    density with 32 points, μ ∈ [−3, 2], y ∈ {0, 1, 5, 50}: ≤ 4e-11 for v ≤ 1 and ≤ 3e-6 for
    v = 4 (worst at y = 0, the most skewed integrand); plain quadrature about N(μ, v): up to
    2e-2 for v = 1 and 0.3 for v = 4.

    Example:

        >>> import numpy as np, torch, sparsegp as sg
        >>> lik = sg.likelihoods.Poisson()
        >>> mean, var = torch.zeros(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64)
        >>> Ey, _ = lik.predict_mean_and_var(mean, var)  # E[y*] = e^(m + v/2) = e^½
        >>> [round(x, 4) for x in Ey.tolist()]
        [1.6487, 1.6487]
        >>> X = np.linspace(0, 1, 30)[:, None]
        >>> m = sg.SVGP(X, np.round(3 * X[:, 0] ** 2 + 1), likelihood=lik, inducing_points=5)
        >>> m.predict_y(X[:4])[0].shape
        (4,)
    """

    def __init__(self, quadrature_points: int = quadrature.DEFAULT_POINTS) -> None:
        super().__init__(quadrature_points)

    def log_prob(self, f: Tensor, y: Tensor) -> Tensor:
        """y f − exp(f) − log Γ(y + 1)."""
        y = y.to(f.dtype)
        return y * f - torch.exp(f) - torch.lgamma(y + 1.0)

    def conditional_mean(self, f: Tensor) -> Tensor:
        """E[y | f] = exp(f)."""
        return torch.exp(f)

    def conditional_variance(self, f: Tensor) -> Tensor:
        """Var[y | f] = exp(f)."""
        return torch.exp(f)

    def variational_expectations(self, mean: Tensor, var: Tensor, y: Tensor) -> Tensor:
        """E_{N(f | m, v)}[log p(y | f)] = y m − exp(m + v/2) − log Γ(y + 1). Shapes: [N] -> [N]."""
        y = y.to(mean.dtype)
        return y * mean - torch.exp(mean + 0.5 * var) - torch.lgamma(y + 1.0)

    def predict_mean_and_var(self, mean: Tensor, var: Tensor) -> tuple[Tensor, Tensor]:
        """E[y*] = exp(m + v/2) and Var[y*] = E[y*] + (exp(v) − 1) exp(2m + v) (the Poisson
        noise plus the log-normal spread of λ). Shapes: [N] -> two [N]."""
        Ey = torch.exp(mean + 0.5 * var)
        return Ey, Ey + torch.expm1(var) * torch.exp(2.0 * mean + var)

    def _mode_and_width(self, mean: Tensor, var: Tensor, y: Tensor, alpha: float
                        ) -> tuple[Tensor, Tensor]:
        """The mode solves h(f) = (f − μ)/v + α(e^f − y) = 0 with h convex and increasing; it
        lies below max(μ, log y), where h ≥ 0, so Newton from there decreases monotonically;
        σ̂² = 1/(1/v + α e^f̂)."""
        f = torch.maximum(mean, torch.log(y)).expand(torch.broadcast_shapes(mean.shape, y.shape))
        for _ in range(NEWTON_ITERATIONS):
            slope = 1.0 / var + alpha * torch.exp(f)
            step = ((f - mean) / var + alpha * (torch.exp(f) - y)) / slope
            f = f - step
            if not bool((step.abs() > 1e-12 * (1.0 + f.abs())).any()):
                break
        return f, 1.0 / (1.0 / var + alpha * torch.exp(f))
