"""The Gaussian likelihood p(y | f) = N(y | f, σ²), with every expectation in closed form."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from .. import quadrature
from ..parameters import as_user_value
from ..runtime.config import NOISE_FLOOR
from ..validation import ArrayLike
from .base import LOG_SQRT_2PI, Likelihood


def gaussian_log_density(y: Tensor, mean: Tensor, var: Tensor) -> Tensor:
    """log N(y | mean, var), elementwise."""
    return -LOG_SQRT_2PI - 0.5 * torch.log(var) - 0.5 * (y - mean) ** 2 / var


class Gaussian(Likelihood):
    """p(y | f) = N(y | f, σ²); `variance` is σ² (positive, floored at `NOISE_FLOOR`).

    Shapes: f, mean, var [..., N], y [N] -> [..., N]. Every method is a closed form
    (`quadrature_points` only matters for the base-class defaults, used in tests).

    Example:

        >>> import torch, sparsegp as sg
        >>> lik = sg.likelihoods.Gaussian(variance=0.1)
        >>> round(lik.variance, 6)
        0.1
        >>> mean, var = torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
        >>> m, v = lik.predict_mean_and_var(mean, var)  # (m, v + σ²)
        >>> [round(x, 6) for x in v.tolist()]
        [1.1, 1.1, 1.1]
        >>> X = torch.linspace(0, 1, 20, dtype=torch.float64)[:, None]
        >>> model = sg.SVGP(X, torch.sin(6 * X[:, 0]), likelihood=lik, inducing_points=5)
        >>> model.predict_y(X[:3])[1].shape  # a tensor in, tensors out
        torch.Size([3])
    """

    bounded_curvature = True

    def __init__(self, variance: ArrayLike | None = None,
                 quadrature_points: int = quadrature.DEFAULT_POINTS) -> None:
        super().__init__(quadrature_points)
        # `variance=None`: 1.0 here, and a data-based start in a model (`initialise_from_data`)
        self._unset = {"variance"} if variance is None else set()
        self._add_positive("variance", 1.0 if variance is None else variance, NOISE_FLOOR)

    def initialise_from_data(self, variance: float) -> None:
        """Give an unset noise variance its starting value (the model's, from its targets)."""
        if "variance" in self._unset:
            self.set_value("variance", variance)
            self._unset.discard("variance")

    @property
    def variance(self) -> float | np.ndarray:
        return as_user_value(self.value("variance"))

    @variance.setter
    def variance(self, v: ArrayLike) -> None:
        self.set_value("variance", v)

    def latent_start(self, y: Tensor) -> Tensor:
        """f starts at y."""
        return y

    def log_prob(self, f: Tensor, y: Tensor) -> Tensor:
        """−½ log 2πσ² − (y − f)²/(2σ²)."""
        return gaussian_log_density(y, f, self.value("variance"))

    def conditional_mean(self, f: Tensor) -> Tensor:
        """E[y | f] = f."""
        return f

    def conditional_variance(self, f: Tensor) -> Tensor:
        """Var[y | f] = σ²."""
        return self.value("variance").expand(f.shape)

    def variational_expectations(self, mean: Tensor, var: Tensor, y: Tensor) -> Tensor:
        """−½ log 2πσ² − ((y − m)² + v)/(2σ²)."""
        s2 = self.value("variance")
        return -LOG_SQRT_2PI - 0.5 * torch.log(s2) - 0.5 * ((y - mean) ** 2 + var) / s2

    def predict_log_density(self, mean: Tensor, var: Tensor, y: Tensor) -> Tensor:
        """log N(y | m, v + σ²)."""
        return gaussian_log_density(y, mean, var + self.value("variance"))

    def predict_mean_and_var(self, mean: Tensor, var: Tensor) -> tuple[Tensor, Tensor]:
        """(m, v + σ²)."""
        return mean, var + self.value("variance")

    def tilted_moments(self, mean: Tensor, var: Tensor, y: Tensor, alpha: float
                       ) -> tuple[Tensor, Tensor, Tensor]:
        """N(y|f, σ²)^α = (2πσ²)^((1−α)/2) α^(−½) N(y | f, σ²/α), so with w = v + σ²/α:
        log Z̃ = ½(1−α) log 2πσ² − ½ log α + log N(y | μ, w), ∂ = (y − μ)/w, ∂² = −1/w."""
        s2 = self.value("variance")
        w = var + s2 / alpha
        log_Z = (0.5 * (1.0 - alpha) * torch.log(2.0 * math.pi * s2) - 0.5 * math.log(alpha)
                 - LOG_SQRT_2PI - 0.5 * torch.log(w) - 0.5 * (y - mean) ** 2 / w)
        return log_Z, (y - mean) / w, -1.0 / w
