"""Separate inducing sets for the parts of a sum of kernels (van der Wilk 2018, §5.7.2). Data only.

f = Σ_i f_i with independent f_i ~ GP(0, k_i); the inducing variables are u = (u_1, …, u_I),
u_i defined by its own feature on f_i alone (inducing patches for a convolutional part,
inducing points for a squared-exponential part, …). Then Kuu is block diagonal and
Kuf = [K_{u_1 f}; …; K_{u_I f}] (`covariances/stacked.py`); q(u) may couple the blocks (SVGP's
default: one full covariance) or not (`SVGP(..., mean_field=True)`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from torch import Tensor, nn

from .base import InducingFeature


class Stacked(InducingFeature):
    """One inducing feature per part of a `kernels.Sum`, in the order of the sum's parts.

    M = Σ_i M_i; the inducing variables are ordered block by block.
    Shapes: Kuu [M, M] (block diagonal), Kuf [M, N] for X [N, D].

    Example:

        >>> import numpy as np, sparsegp as sg
        >>> from sparsegp import covariances
        >>> f = sg.features.Stacked([sg.features.InducingPoints(np.zeros((3, 1))),
        ...                          sg.features.InducingPoints(np.ones((4, 1)))])
        >>> f.blocks, f.num_inducing
        ([3, 4], 7)
        >>> k = sg.kernels.SquaredExponential() + sg.kernels.Linear()
        >>> K = covariances.Kuu(f, k)
        >>> tuple(K.shape), bool((K[:3, 3:] == 0).all())
        ((7, 7), True)
    """

    #: The parts: an `nn.ModuleList` (so that they are submodules), typed as the features it holds.
    features: Sequence[InducingFeature]

    def __init__(self, features: list[InducingFeature]) -> None:
        super().__init__()
        features = list(features)
        if not features or not all(isinstance(f, InducingFeature) for f in features):
            raise TypeError("Stacked takes a non-empty list of inducing features (one per part of "
                            "a sum of kernels)")
        if any(isinstance(f, Stacked) for f in features):
            raise TypeError("Stacked features cannot be nested")
        self.features = cast("Sequence[InducingFeature]", nn.ModuleList(features))

    @property
    def blocks(self) -> list[int]:
        """M_i of every part."""
        return [f.num_inducing for f in self.features]

    @property
    def num_inducing(self) -> int:
        return sum(self.blocks)

    @property
    def input_dim(self) -> int:
        """The largest of the parts' (a convolutional part's kernel fixes the image dimension)."""
        return max(f.input_dim for f in self.features)

    @property
    def width(self) -> int:
        return sum(f.width for f in self.features)

    def config(self) -> dict[str, Any]:
        return {"type": type(self).__name__, "features": [f.config() for f in self.features]}

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> Stacked:
        return cls([InducingFeature.registry.build(c) for c in cfg["features"]])

    def transformed(self, shift: Tensor, scale: Tensor) -> Stacked:
        return type(self)([f.transformed(shift, scale) for f in self.features])

    @classmethod
    def from_data(cls, X: Any, num_inducing: int, *, seed: int = 0, **options: Any) -> Stacked:
        raise TypeError("build Stacked features from one feature per part: "
                        "Stacked([InducingPatches(...), InducingPoints(...)])")

    def extra_repr(self) -> str:
        return f"blocks={self.blocks}"
