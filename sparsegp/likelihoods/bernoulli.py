"""Binary classification: p(y = 1 | f) = Φ(f) (probit) or σ(f) (logit)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from .. import quadrature
from .base import Likelihood

LINKS = ("probit", "logit")


class Bernoulli(Likelihood):
    """p(y | f) = Φ(s f) (probit) or σ(s f) (logit) with the sign s = 2y − 1.

    Labels y ∈ {0, 1} (also accepted: {−1, +1}, mapped to {0, 1} by `check_targets`).
    Shapes: f, mean, var [..., N], y [N] -> [..., N]. The probit link has closed forms for
    the predictive density and, at α = 1, the Power-EP tilted moments; everything else uses
    Gauss–Hermite quadrature with `quadrature_points` nodes.

    Example:

        >>> import numpy as np, torch, sparsegp as sg
        >>> lik = sg.likelihoods.Bernoulli()  # probit
        >>> lik.check_targets(torch.tensor([-1.0, 1.0, 1.0])).tolist()
        [0.0, 1.0, 1.0]
        >>> p, var = lik.predict_mean_and_var(torch.zeros(2, dtype=torch.float64),
        ...                                   torch.ones(2, dtype=torch.float64))
        >>> [round(x, 6) for x in p.tolist()]  # Φ(0/√2)
        [0.5, 0.5]
        >>> X = np.linspace(-1, 1, 20)[:, None]
        >>> m = sg.SVGP(X, (X[:, 0] > 0).astype(float), likelihood=sg.likelihoods.Bernoulli(link="logit"),
        ...             inducing_points=5)
        >>> m.predict_proba(X[:3]).shape
        (3,)
    """

    bounded_curvature = True

    def __init__(self, link: str = "probit", quadrature_points: int = quadrature.DEFAULT_POINTS) -> None:
        super().__init__(quadrature_points)
        if link not in LINKS:
            raise ValueError(f"link must be one of {LINKS}; got {link!r}")
        self.link = link

    def _structure(self) -> dict[str, Any]:
        return {"link": self.link, **super()._structure()}

    def check_targets(self, y: Tensor) -> Tensor:
        """Labels [N] in {0, 1} are returned as they are, labels in {−1, +1} as (y + 1)/2."""
        values = set(torch.unique(y).tolist())
        if values <= {0.0, 1.0}:
            return y
        if values <= {-1.0, 1.0}:
            return (y + 1.0) / 2.0
        bad = sorted(values - {0.0, 1.0} if values & {0.0} else values - {-1.0, 1.0})
        shown = ", ".join(f"{v:.4g}" for v in bad[:5]) + (", …" if len(bad) > 5 else "")
        raise ValueError(f"Bernoulli labels must be binary, {{0, 1}} or {{-1, +1}}; got "
                         f"{len(values)} distinct values, offending: {shown}")

    def check_training_targets(self, y: Tensor) -> Tensor:
        """`check_targets`, and the labels must hold both classes."""
        y = self.check_targets(y)
        if torch.unique(y).numel() < 2:
            raise ValueError(f"y holds only one class (every label is {float(y[0]):g} after "
                             "mapping to {0, 1}): a classifier needs examples of both classes")
        return y

    def log_prob(self, f: Tensor, y: Tensor) -> Tensor:
        """log Φ(s f) or log σ(s f) = −softplus(−s f), s = 2y − 1."""
        sign = 2.0 * y - 1.0
        if self.link == "probit":
            return torch.special.log_ndtr(sign * f)
        return -torch.nn.functional.softplus(-sign * f)

    def conditional_mean(self, f: Tensor) -> Tensor:
        """p(y = 1 | f) = Φ(f) or σ(f)."""
        return torch.special.ndtr(f) if self.link == "probit" else torch.sigmoid(f)

    def conditional_variance(self, f: Tensor) -> Tensor:
        """p(1 − p) with p = p(y = 1 | f)."""
        p = self.conditional_mean(f)
        return p * (1.0 - p)

    def predict_mean_and_var(self, mean: Tensor, var: Tensor) -> tuple[Tensor, Tensor]:
        """p(y* = 1) = Φ(m/√(1 + v)) for the probit link (quadrature for the logit), and the
        Bernoulli variance p(1 − p). Shapes: [N] -> two [N]."""
        if self.link != "probit":
            return super().predict_mean_and_var(mean, var)
        p = torch.special.ndtr(mean / torch.sqrt(1.0 + var))
        return p, p * (1.0 - p)

    def predict_log_density(self, mean: Tensor, var: Tensor, y: Tensor) -> Tensor:
        """Probit: log Φ(s m/√(1 + v)) (Rasmussen & Williams 2006, eq. 3.82); logit: quadrature.
        Shapes: [N] -> [N]."""
        if self.link != "probit":
            return super().predict_log_density(mean, var, y)
        return torch.special.log_ndtr((2.0 * y - 1.0) * mean / torch.sqrt(1.0 + var))

    def tilted_moments(self, mean: Tensor, var: Tensor, y: Tensor, alpha: float
                       ) -> tuple[Tensor, Tensor, Tensor]:
        """Probit and α = 1: Z̃ = Φ(z), z = sμ/√(1 + v) (Rasmussen & Williams 2006, eq. 3.58),
        ∂ log Z̃ = sρ/√(1 + v), ∂² = −ρ(z + ρ)/(1 + v), ρ = N(z)/Φ(z) (computed in logs).
        Otherwise Gauss–Hermite quadrature. Shapes: [N] -> three [N]."""
        if self.link != "probit" or alpha != 1.0:
            return super().tilted_moments(mean, var, y, alpha)
        sign = 2.0 * y - 1.0
        root = torch.sqrt(1.0 + var)
        z = sign * mean / root
        log_Phi = torch.special.log_ndtr(z)
        ratio = torch.exp(-0.5 * z * z - 0.5 * math.log(2.0 * math.pi) - log_Phi)
        return log_Phi, sign * ratio / root, -ratio * (z + ratio) / (1.0 + var)
