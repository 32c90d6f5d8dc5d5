"""Sums of weighted deltas: v(x; m) = Σ_c w_mc δ(x − z_mc) (van der Wilk 2018, §4.4). Data only."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..validation import ArrayLike
from .base import InducingFeature, checked_array
from .initialisation import cluster_members, initial_inducing_inputs


class SumOfDeltas(InducingFeature):
    """u_m = Σ_c w_mc f(z_mc): each inducing variable a weighted sum of C function values.

    Shapes: Z [M, C, D] and weights [M, C], both trainable (weights of either sign). With
    C = 1 and unit weights the features are inducing points f(z_m). Any kernel:
    Kuf = Σ_c w_mc k(z_mc, x), Kuu = Σ_{c,c'} w_mc w_m'c' k(z_mc, z_m'c')
    (`covariances/deltas.py`), from one kernel evaluation on the M·C points.
    Shapes: Kuu [M, M], Kuf [M, N] for X [N, D]; `locations()` [M, D] (weighted centroids).

    Example:

        >>> import numpy as np, torch, sparsegp as sg
        >>> from sparsegp import covariances
        >>> X, y = sg.datasets.snelson()
        >>> f = sg.features.SumOfDeltas.from_data(X, 6, num_deltas=3)
        >>> tuple(f.Z.shape), tuple(f.weights.shape), f.num_inducing, f.num_deltas
        ((6, 3, 1), (6, 3), 6, 3)
        >>> k = sg.kernels.SquaredExponential(lengthscale=1.0)
        >>> tuple(covariances.Kuf(f, k, torch.as_tensor(X)).shape)
        (6, 200)
    """

    Z: Tensor
    weights: Tensor

    def __init__(self, Z: ArrayLike, weights: ArrayLike) -> None:
        super().__init__()
        Z = checked_array(Z, "Z", 3)
        w = checked_array(weights, "weights", 2)
        if w.shape != Z.shape[:2]:
            raise ValueError(f"weights must have shape [M, C] = {list(Z.shape[:2])} to match "
                             f"Z [M, C, D] = {list(Z.shape)}; got {list(w.shape)}")
        zero = torch.nonzero((w == 0).all(1)).flatten().tolist()
        if zero:
            raise ValueError(f"weights: row(s) {zero[:5]} are all zero, so those inducing "
                             "variables are identically 0 (Kuu is singular); give each at least "
                             "one nonzero weight")
        self._add_free("Z", Z)
        self._add_free("weights", w)

    @property
    def num_inducing(self) -> int:
        return self.Z.shape[0]

    @property
    def num_deltas(self) -> int:
        """C, the deltas per inducing variable."""
        return self.Z.shape[1]

    @property
    def input_dim(self) -> int:
        return self.Z.shape[2]

    @property
    def width(self) -> int:
        return self.num_inducing * self.num_deltas

    def points(self) -> Tensor:
        """All M·C delta locations [M·C, D] (a view: gradients reach Z)."""
        return self.Z.reshape(-1, self.input_dim)

    def config(self) -> dict[str, Any]:
        return {"type": type(self).__name__, "args": {"shape": list(self.Z.shape)}}

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> SumOfDeltas:
        M, C, D = cfg["args"]["shape"]
        return cls(torch.zeros(M, C, D, dtype=torch.float64), torch.ones(M, C, dtype=torch.float64))

    def transformed(self, shift: Tensor, scale: Tensor) -> SumOfDeltas:
        return type(self)((self.Z.detach() - shift) / scale, self.weights.detach())

    def locations(self) -> Tensor:
        """The |w|-weighted centroid of each inducing variable's deltas [M, D]."""
        w = self.weights.detach().abs()
        w = w / w.sum(1, keepdim=True).clamp_min(torch.finfo(w.dtype).tiny)
        return (w[..., None] * self.Z.detach()).sum(1)

    def extended(self, Z: Tensor) -> SumOfDeltas:
        """Inducing points f(Z) as C deltas at each z with weights (1, 0, …, 0): exact."""
        K, C = Z.shape[0], self.num_deltas
        w = torch.zeros(K, C, dtype=self.weights.dtype, device=self.weights.device)
        w[:, 0] = 1.0
        Znew = Z.to(self.Z)[:, None, :].expand(K, C, self.input_dim)
        return type(self)(torch.cat([self.Z.detach(), Znew]), torch.cat([self.weights.detach(), w]))

    @classmethod
    def from_data(cls, X: ArrayLike, num_inducing: int, *, seed: int = 0, method: str = "kmeans++",
                  num_deltas: int = 1) -> SumOfDeltas:
        """M centres chosen from X by `method` (seeded k-means++); each feature's first delta at
        its centre, the other C − 1 at points of its cluster; equal weights 1/C."""
        Z = initial_inducing_inputs(X, num_inducing, method, seed)
        if num_deltas < 1:
            raise ValueError(f"num_deltas must be at least 1; got {num_deltas}")
        deltas = cluster_members(torch.as_tensor(X, dtype=Z.dtype), Z, int(num_deltas), seed)
        return cls(deltas, torch.full(deltas.shape[:2], 1.0 / num_deltas, dtype=Z.dtype))
