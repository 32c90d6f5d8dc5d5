"""The likelihood interface: p(y | f), its Gaussian expectations and Power-EP tilted moments.

Shapes: for one latent function, f, mean and var are [N] (or [..., N] for stacked samples)
and y is [N]; a likelihood of C latent functions (`num_latent = C`) takes [N, C] instead.
Defaults here use Gauss–Hermite quadrature on `log_prob`; subclasses override them with
closed forms where those exist. Every subclass is registered by class name so that
`likelihood_from_config(lik.config())` rebuilds it (parameter values then come from
`load_state_dict`).
"""

from __future__ import annotations

import math
import numbers
from abc import ABC, abstractmethod
from typing import Any

import torch
from torch import Tensor

from .. import quadrature
from ..parameters import Parameterised
from ..registry import Registered, Registry


class Likelihood(Registered, Parameterised, ABC):
    """p(y | f). Subclasses implement at least `log_prob`, `conditional_mean` and
    `conditional_variance` (and `check_targets` for label constraints).

    Shapes: f, mean, var [..., N] (multi-latent: [..., N, C]), y [N] -> [..., N]. The Gaussian
    expectations (`variational_expectations`, `predict_log_density`, `predict_mean_and_var`,
    `tilted_moments`) default to Gauss–Hermite quadrature of `log_prob` (of the conditional
    moments for `predict_mean_and_var`). A subclass may set `bounded_curvature = True` when
    ∂²log p(y | f)/∂f² is bounded (SVGP's minibatch training then skips the check of each
    natural-gradient step), `mean_latent` (the latent function a prior mean shifts) and
    `latent_start(y)` (where a prior mean starts).

    Example:

        >>> import math, torch, sparsegp as sg
        >>> class Laplace(sg.likelihoods.Likelihood):
        ...     # p(y | f) = exp(−|y − f|)/2: robust regression
        ...     def log_prob(self, f, y):
        ...         return -(y - f).abs() - math.log(2.0)
        ...     def conditional_mean(self, f):
        ...         return f
        ...     def conditional_variance(self, f):
        ...         return torch.full_like(f, 2.0)
        >>> lik = Laplace()
        >>> isinstance(lik, sg.likelihoods.Likelihood), lik.num_latent
        (True, 1)
        >>> mean, var = torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
        >>> y = torch.tensor([0.0, 1.0, -2.0], dtype=torch.float64)
        >>> tuple(lik.variational_expectations(mean, var, y).shape)
        (3,)
        >>> [round(v, 6) for v in lik.predict_mean_and_var(mean, var)[1].tolist()]
        [3.0, 3.0, 3.0]
    """

    num_latent: int = 1
    #: the latent function that a model's prior mean m(x) shifts (None: every one of them)
    mean_latent: int | None = None
    #: log p(y | f) has a bounded second derivative in f (Gaussian, Bernoulli, MultiClass):
    #: natural-gradient steps do not overshoot as under an exponential link (Poisson, the
    #: heteroscedastic noise), so minibatch training does not check them (`training.minibatch`)
    bounded_curvature: bool = False
    registry = Registry("likelihood")
    quadrature_points: int

    def __init__(self, quadrature_points: int = quadrature.DEFAULT_POINTS) -> None:
        super().__init__()
        if not isinstance(quadrature_points, numbers.Integral) or quadrature_points < 1:
            raise ValueError(f"quadrature_points must be a positive integer; got {quadrature_points!r}")
        self.quadrature_points = int(quadrature_points)

    # -- structure for save/load ----------------------------------------------------------
    def config(self) -> dict[str, Any]:
        """Type name and constructor arguments, as plain Python values, that rebuild this
        likelihood: `{"type": "Bernoulli", "args": {"link": "probit", ...}}`. Positive
        parameters appear with their current values; `load_state_dict` restores them exactly."""
        args = self.positive_arguments()
        args.update(self._structure())
        return {"type": type(self).__name__, "args": args}

    def _structure(self) -> dict[str, Any]:
        """Constructor arguments other than parameters; subclasses with more extend this."""
        return {"quadrature_points": self.quadrature_points}

    def latent_start(self, y: Tensor) -> Tensor | None:
        """Values of the latent function near which targets y [N] put it, for a prior mean's
        starting values (`Mean.initialise_from_data`); None: zero."""
        return None

    def check_targets(self, y: Tensor) -> Tensor:
        """Validate targets [N] and return them in the form `log_prob` expects."""
        return y

    def check_training_targets(self, y: Tensor) -> Tensor:
        """`check_targets` for the targets a model is fitted to, plus what fitting needs of
        them (a classifier: both classes)."""
        return self.check_targets(y)

    @abstractmethod
    def log_prob(self, f: Tensor, y: Tensor) -> Tensor:
        """log p(y | f), elementwise. Shapes: f [..., N] (or [..., N, C]), y [N] -> [..., N]."""

    @abstractmethod
    def conditional_mean(self, f: Tensor) -> Tensor:
        """E[y | f], elementwise. Shapes: f [..., N] -> [..., N] (multi-latent: [..., N, C])."""

    @abstractmethod
    def conditional_variance(self, f: Tensor) -> Tensor:
        """Var[y | f], elementwise. Shapes as `conditional_mean`."""

    def variational_expectations(self, mean: Tensor, var: Tensor, y: Tensor) -> Tensor:
        """E_{f ~ N(mean, var)}[log p(y | f)]. Shapes: [N] -> [N]."""
        return quadrature.expectation(lambda f: self.log_prob(f.movedim(-1, 0), y).movedim(0, -1),
                                      mean, var, self.quadrature_points)

    def predict_log_density(self, mean: Tensor, var: Tensor, y: Tensor) -> Tensor:
        """log ∫ p(y | f) N(f | mean, var) df. Shapes: [N] -> [N]."""
        return quadrature.log_expectation_exp(
            lambda f: self.log_prob(f.movedim(-1, 0), y).movedim(0, -1),
            mean, var, self.quadrature_points)

    def predict_mean_and_var(self, mean: Tensor, var: Tensor) -> tuple[Tensor, Tensor]:
        """Mean and variance of y* when f* ~ N(mean, var), by the laws of total expectation and
        variance: E[y*] = E[E[y|f]], Var[y*] = E[Var[y|f] + E[y|f]²] − E[y*]². Shapes: [N] -> two [N]."""
        n = self.quadrature_points
        Ey = quadrature.expectation(self.conditional_mean, mean, var, n)
        Ey2 = quadrature.expectation(lambda f: self.conditional_variance(f)
                                     + self.conditional_mean(f) ** 2, mean, var, n)
        return Ey, (Ey2 - Ey**2).clamp_min(0.0)

    def tilted_moments(self, mean: Tensor, var: Tensor, y: Tensor, alpha: float
                       ) -> tuple[Tensor, Tensor, Tensor]:
        """Power-EP tilted normaliser log Z̃ = log E_{f ~ N(mean, var)}[p(y | f)^α] and its
        first and second derivatives with respect to `mean` (docs/math.md §5, step 2).

        By quadrature: with tilted mean m̃ and variance ṽ,
        ∂ log Z̃/∂μ = (m̃ − μ)/v and ∂² log Z̃/∂μ² = (ṽ − v)/v². Shapes: [N] -> three [N].
        """
        f, w = quadrature.points(mean, var, self.quadrature_points)
        logp = alpha * self.log_prob(f.movedim(-1, 0), y).movedim(0, -1) + torch.log(w)
        logZ = torch.logsumexp(logp, dim=-1)
        p = torch.exp(logp - logZ[..., None])  # tilted weights, summing to 1
        dev = f - mean[..., None]
        m1 = (p * dev).sum(-1)
        m2 = (p * dev * dev).sum(-1) - m1 * m1
        return logZ, m1 / var, (m2 - var) / var**2


LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def likelihood_from_config(cfg: dict[str, Any]) -> Likelihood:
    """Rebuild a likelihood from `Likelihood.config()` output (then `load_state_dict`).

    Shapes: none (a plain dict in, a likelihood out).

    Example:

        >>> import sparsegp as sg
        >>> lik = sg.likelihoods.Bernoulli(link="logit")
        >>> lik.config()
        {'type': 'Bernoulli', 'args': {'link': 'logit', 'quadrature_points': 32}}
        >>> copy = sg.likelihoods.likelihood_from_config(lik.config())
        >>> type(copy).__name__, copy.link
        ('Bernoulli', 'logit')
    """
    return Likelihood.registry.build(cfg)
