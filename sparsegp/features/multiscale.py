"""Multi-scale inducing features: Gaussian windows v(x; m) = N(x; z_m, diag δ_m²) (Walder et
al. 2008; Lázaro-Gredilla & Figueiras-Vidal 2009; docs/math.md §8). Data only."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..parameters import as_user_value
from ..validation import ArrayLike
from .base import InducingFeature, checked_array
from .initialisation import cluster_spreads, initial_inducing_inputs

#: Lower bound on the window widths δ: only δ² enters the maths and δ = 0 is a point.
SCALE_FLOOR = 0.0


class Multiscale(InducingFeature):
    """u_m = ∫ f(x) N(x; z_m, diag δ_m²) dx: a local average of f around z_m.

    Shapes: Z [M, D] (window centres, trainable), scales [M, D] (the standard deviations δ,
    positive and trainable; a scalar or [D] is broadcast). As δ → 0 the features tend to
    inducing points f(z_m). Closed forms for the squared-exponential kernel in
    `covariances/multiscale.py`.

    Example:

        >>> import numpy as np, sparsegp as sg
        >>> from sparsegp import covariances
        >>> f = sg.features.Multiscale(np.linspace(0, 6, 8)[:, None], scales=0.3)
        >>> f.num_inducing, f.scales.shape
        (8, (8, 1))
        >>> k = sg.kernels.SquaredExponential(lengthscale=1.0)
        >>> tuple(covariances.Kuu(f, k).shape)
        (8, 8)
        >>> X, y = sg.datasets.snelson()
        >>> sg.SGPR(X[::4], y[::4], inducing_points=f).inducing_points.shape
        (8, 1)
    """

    Z: Tensor

    def __init__(self, Z: ArrayLike, scales: ArrayLike) -> None:
        super().__init__()
        Z = checked_array(Z, "Z", 2)
        s = torch.as_tensor(scales, dtype=Z.dtype)
        if s.dim() > 2 or (s.dim() == 2 and s.shape != Z.shape) or (
                s.dim() == 1 and s.shape[0] != Z.shape[1]):
            raise ValueError(f"scales must be a scalar, [D] = [{Z.shape[1]}] or [M, D] = "
                             f"{list(Z.shape)}; got shape {tuple(s.shape)}")
        self._add_free("Z", Z)
        self._add_positive("scales", s.expand_as(Z).clone(), SCALE_FLOOR, max_dim=2)

    @property
    def scales(self) -> Any:
        """Window widths δ [M, D] (internal units of the model's inputs)."""
        return as_user_value(self.value("scales"))

    @property
    def num_inducing(self) -> int:
        return self.Z.shape[0]

    @property
    def input_dim(self) -> int:
        return self.Z.shape[1]

    def config(self) -> dict[str, Any]:
        return {"type": type(self).__name__, "args": {"shape": list(self.Z.shape)}}

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> Multiscale:
        shape = cfg["args"]["shape"]
        return cls(torch.zeros(shape, dtype=torch.float64), 1.0)

    def transformed(self, shift: Tensor, scale: Tensor) -> Multiscale:
        # N(x; z, δ²) dx = N(x'; (z − shift)/scale, (δ/scale)²) dx' for x = scale·x' + shift
        return type(self)((self.Z.detach() - shift) / scale, self.value("scales").detach() / scale)

    def locations(self) -> Tensor:
        return self.Z

    def set_locations(self, Z: Tensor) -> None:
        self.set_value("Z", Z)

    def extended(self, Z: Tensor) -> Multiscale:
        """New windows at Z with widths 1e-6 of the current mean width: inducing points up
        to a relative O(1e-12) in the covariances."""
        scales = self.value("scales").detach()
        new = torch.full_like(Z, 1e-6 * float(scales.mean()))
        return type(self)(torch.cat([self.Z.detach(), Z.to(self.Z)]), torch.cat([scales, new]))

    @classmethod
    def from_data(cls, X: ArrayLike, num_inducing: int, *, seed: int = 0, method: str = "kmeans++",
                  width: float = 0.5) -> Multiscale:
        """Centres chosen from X by `method` (seeded k-means++); widths `width` times the
        spread of the points nearest each centre, per dimension."""
        Z = initial_inducing_inputs(X, num_inducing, method, seed)
        X = torch.as_tensor(X, dtype=Z.dtype)
        return cls(Z, width * cluster_spreads(X, Z))
