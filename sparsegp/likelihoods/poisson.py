"""Count data: p(y | f) = Poisson(y | λ = exp(f)), the log link."""

from __future__ import annotations

import torch
from torch import Tensor

from .. import quadrature
from .base import Likelihood

#: Newton iterations (at most) for the mode of N(f; μ, v) p(y | f)^α; each converges
#: monotonically from its starting point, quadratically near the mode.
NEWTON_ITERATIONS = 50


class Poisson(Likelihood):
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

    def latent_start(self, y: Tensor) -> Tensor:
        """log(y + ½): the log rate near the counts (finite at y = 0)."""
        return torch.log(y.to(torch.float64) + 0.5)

    def check_targets(self, y: Tensor) -> Tensor:
        """Counts [N] must be non-negative integers (any numeric dtype); returned unchanged."""
        bad = y[~torch.isfinite(y) | (y < 0) | (y != torch.round(y))] if y.is_floating_point() else y[y < 0]
        if bad.numel():
            values = torch.unique(bad).tolist()
            raise ValueError(f"Poisson targets must be non-negative integers (counts); got "
                             f"{bad.numel()} offending values, e.g. {values[:10]}")
        return y

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

    def predict_log_density(self, mean: Tensor, var: Tensor, y: Tensor) -> Tensor:
        """log ∫ Poisson(y | e^f) N(f | m, v) df (the Poisson–log-normal pmf) by adaptive
        Gauss–Hermite quadrature. Shapes: [N] -> [N]."""
        f, log_w = self._centred_points(mean, var, y, 1.0)
        return torch.logsumexp(log_w + self.log_prob(f.movedim(-1, 0), y).movedim(0, -1), dim=-1)

    def tilted_moments(self, mean: Tensor, var: Tensor, y: Tensor, alpha: float
                       ) -> tuple[Tensor, Tensor, Tensor]:
        """log Z̃ = log E_{N(f; μ, v)}[p(y | f)^α], ∂ log Z̃/∂μ = (m̃ − μ)/v and
        ∂² log Z̃/∂μ² = (ṽ − v)/v² from the tilted mean m̃ and variance ṽ, by adaptive
        Gauss–Hermite quadrature (docs/math.md §5, step 2). Shapes: [N] -> three [N]."""
        f, log_w = self._centred_points(mean, var, y, alpha)
        logp = log_w + alpha * self.log_prob(f.movedim(-1, 0), y).movedim(0, -1)
        log_Z = torch.logsumexp(logp, dim=-1)
        p = torch.exp(logp - log_Z[..., None])  # tilted weights, summing to 1
        dev = f - mean[..., None]
        m1 = (p * dev).sum(-1)
        m2 = (p * (dev - m1[..., None]) ** 2).sum(-1)
        return log_Z, m1 / var, (m2 - var) / var**2

    def _centred_points(self, mean: Tensor, var: Tensor, y: Tensor, alpha: float
                        ) -> tuple[Tensor, Tensor]:
        """Nodes f_i = f̂ + σ̂ z_i [..., n] about the mode f̂ of N(f; μ, v) p(y | f)^α, with
        σ̂² = 1/(1/v + α e^f̂), and log weights log w_i + log N(f_i; μ, v) − log N(f_i; f̂, σ̂²),
        so that E_{N(μ, v)}[g] ≈ Σ_i exp(log weight_i) g(f_i). The centre is a constant for
        autograd (the integral does not depend on it)."""
        y = y.to(mean.dtype)
        with torch.no_grad():
            # The mode solves h(f) = (f − μ)/v + α(e^f − y) = 0 with h convex and increasing; it
            # lies below max(μ, log y), where h ≥ 0, so Newton from there decreases monotonically.
            f = torch.maximum(mean, torch.log(y)).expand(torch.broadcast_shapes(mean.shape, y.shape))
            for _ in range(NEWTON_ITERATIONS):
                slope = 1.0 / var + alpha * torch.exp(f)
                step = ((f - mean) / var + alpha * (torch.exp(f) - y)) / slope
                f = f - step
                if not bool((step.abs() > 1e-12 * (1.0 + f.abs())).any()):
                    break
            s2 = 1.0 / (1.0 / var + alpha * torch.exp(f))
        z, w = quadrature.nodes_and_weights(self.quadrature_points, mean)
        points = f[..., None] + torch.sqrt(s2)[..., None] * z
        log_w = (torch.log(w) + 0.5 * z * z + 0.5 * torch.log(s2 / var)[..., None]
                 - 0.5 * (points - mean[..., None]) ** 2 / var[..., None])
        return points, log_w
