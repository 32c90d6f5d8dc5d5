"""One inducing feature per output (or latent function), with a `kernels.Separate` kernel."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from torch import Tensor, nn

from .base import InducingFeature


class Separate(InducingFeature):
    """The inducing variables of independent outputs with a kernel each: features[p] defines
    output p's, against kernels[p] of a `sparsegp.kernels.Separate` kernel. A model builds it
    from `inducing_points` (an int M or an array: the same start for every output, trained
    separately; or a list with one entry per output).

    Shapes: P features of M_p inducing variables each ([M, D] inducing inputs for inducing
    points); `num_inducing` is the largest M_p (SVGP needs them equal).

    Example:

        >>> import numpy as np, sparsegp as sg
        >>> f = sg.features.Separate([sg.features.InducingPoints(np.zeros((3, 1))),
        ...                           sg.features.InducingPoints(np.ones((5, 1)))])
        >>> f.blocks, f.num_inducing
        ([3, 5], 5)
    """

    features: Sequence[InducingFeature]

    def __init__(self, features: list[InducingFeature]) -> None:
        super().__init__()
        features = list(features)
        if not features or not all(isinstance(f, InducingFeature) for f in features):
            raise TypeError("features.Separate takes a non-empty list of inducing features (one "
                            "per output)")
        if any(isinstance(f, Separate) for f in features):
            raise TypeError("Separate features cannot be nested")
        self.features = cast("Sequence[InducingFeature]", nn.ModuleList(features))

    @property
    def blocks(self) -> list[int]:
        """M_p of every output."""
        return [f.num_inducing for f in self.features]

    @property
    def num_inducing(self) -> int:
        return max(self.blocks)

    @property
    def input_dim(self) -> int:
        return max(f.input_dim for f in self.features)

    @property
    def width(self) -> int:
        return max(f.width for f in self.features)

    def locations(self) -> Tensor | None:
        return None  # one set per output: read model.feature.features[p]

    def config(self) -> dict[str, Any]:
        return {"type": type(self).__name__, "features": [f.config() for f in self.features]}

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> Separate:
        return cls([InducingFeature.registry.build(c) for c in cfg["features"]])

    def transformed(self, shift: Tensor, scale: Tensor) -> Separate:
        return type(self)([f.transformed(shift, scale) for f in self.features])

    @classmethod
    def from_data(cls, X: Any, num_inducing: int, *, seed: int = 0, **options: Any) -> Separate:
        raise TypeError("a model builds Separate features from inducing_points and a "
                        "kernels.Separate kernel; or give Separate([feature per output])")

    def extra_repr(self) -> str:
        return f"blocks={self.blocks}"


def separate_features(feature: InducingFeature) -> list[InducingFeature] | None:
    """The features of a `Separate` feature, else None."""
    return list(feature.features) if isinstance(feature, Separate) else None
