"""What the count likelihoods (`Poisson`, `NegativeBinomial`) share — the check of their
targets, the latent start log(y + ½) — and what they share with `Gamma` and `Beta`: the
predictive density and Power-EP tilted moments by Gauss–Hermite quadrature centred on the mode
of the integrand N(f; μ, v) p(y | f)^α with its Laplace width (adaptive Gauss–Hermite, Liu &
Pierce 1994), and the safeguarded Newton search that finds that mode (`bracketed_root`).
Each likelihood says where the mode is and how wide (`_mode_and_width`); the nodes, weights
and moments are here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from .. import quadrature

#: Iterations (at most) of `bracketed_root`: each halves the bracket at worst, so 60 reach
#: rounding from any bracket of floats.
NEWTON_ITERATIONS = 60


def bracketed_root(h_and_slope: Callable[[Tensor], tuple[Tensor, Tensor]], low: Tensor,
                   high: Tensor, iterations: int = NEWTON_ITERATIONS) -> Tensor:
    """The root of an increasing h in [low, high] (h(low) ≤ 0 ≤ h(high)), elementwise:
    Newton steps kept inside the bracket, which shrinks around the root at every step, and
    bisection where a step would leave it or the slope is not positive. `h_and_slope(f)`
    gives h(f) and ∂h/∂f. Shapes: low, high [...] -> [...]."""
    f = 0.5 * (low + high)
    for _ in range(iterations):
        hf, slope = h_and_slope(f)
        low = torch.where(hf <= 0.0, f, low)
        high = torch.where(hf >= 0.0, f, high)
        new = f - hf / slope
        outside = ~((new > low) & (new < high)) | (slope <= 0.0)
        new = torch.where(outside, 0.5 * (low + high), new)
        done = not bool(((new - f).abs() > 1e-12 * (1.0 + f.abs())).any())
        f = new
        if done:
            break
    return f


class CountLikelihood:
    """Mixin, listed before `Likelihood`, for a likelihood of counts y ∈ {0, 1, 2, …} under a
    log link (see the module docstring); not itself a registered likelihood. Shapes: f, mean,
    var [..., N], y [N] -> [..., N]."""

    if TYPE_CHECKING:  # what the likelihood it is mixed into provides
        quadrature_points: int

        def log_prob(self, f: Tensor, y: Tensor) -> Tensor: ...

        def _mode_and_width(self, mean: Tensor, var: Tensor, y: Tensor, alpha: float
                            ) -> tuple[Tensor, Tensor]:
            """The mode f̂ of N(f; μ, v) p(y | f)^α and σ̂² = 1/(1/v − ∂² α log p/∂f² at
            f̂), under no_grad (the integral does not depend on where the nodes are
            centred)."""

    def latent_start(self, y: Tensor) -> Tensor:
        """log(y + ½): the log mean near the counts (finite at y = 0)."""
        return torch.log(y.to(torch.float64) + 0.5)

    def check_targets(self, y: Tensor) -> Tensor:
        """Counts [N] must be non-negative integers (any numeric dtype); returned unchanged."""
        bad = (y[~torch.isfinite(y) | (y < 0) | (y != torch.round(y))] if y.is_floating_point()
               else y[y < 0])
        if bad.numel():
            values = torch.unique(bad).tolist()
            raise ValueError(f"{type(self).__name__} targets must be non-negative integers "
                             f"(counts); got {bad.numel()} offending values, e.g. {values[:10]}")
        return y

    def predict_log_density(self, mean: Tensor, var: Tensor, y: Tensor) -> Tensor:
        """log ∫ p(y | f) N(f | m, v) df by Gauss–Hermite quadrature centred on the
        integrand's mode. Shapes: [N] -> [N]."""
        f, log_w = self._centred_points(mean, var, y, 1.0)
        return torch.logsumexp(log_w + self.log_prob(f.movedim(-1, 0), y).movedim(0, -1), dim=-1)

    def tilted_moments(self, mean: Tensor, var: Tensor, y: Tensor, alpha: float
                       ) -> tuple[Tensor, Tensor, Tensor]:
        """log Z̃ = log E_{N(f; μ, v)}[p(y | f)^α], ∂ log Z̃/∂μ = (m̃ − μ)/v and
        ∂² log Z̃/∂μ² = (ṽ − v)/v² from the tilted mean m̃ and variance ṽ, by Gauss–Hermite
        quadrature centred on the mode (docs/math.md §5, step 2). Shapes: [N] -> three [N]."""
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
        """Nodes f_i = f̂ + σ̂ z_i [..., n] and log weights log w_i + log N(f_i; μ, v) −
        log N(f_i; f̂, σ̂²), so that E_{N(μ, v)}[g] ≈ Σ_i exp(log weight_i) g(f_i)."""
        with torch.no_grad():
            f, s2 = self._mode_and_width(mean, var, y.to(mean.dtype), alpha)
        z, w = quadrature.nodes_and_weights(self.quadrature_points, mean)
        points = f[..., None] + torch.sqrt(s2)[..., None] * z
        log_w = (torch.log(w) + 0.5 * z * z + 0.5 * torch.log(s2 / var)[..., None]
                 - 0.5 * (points - mean[..., None]) ** 2 / var[..., None])
        return points, log_w
