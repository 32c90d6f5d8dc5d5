"""A list of inducing features as one feature: what `Stacked` (one set per part of a sum of
kernels) and `Separate` (one set per output) share. Data only."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from torch import Tensor, nn

from ..validation import ArrayLike
from .base import InducingFeature


class FeatureList(InducingFeature):
    """Several inducing features kept as parts (`features`, in order); subclasses say how the
    parts' inducing variables combine (`num_inducing`, `width`)."""

    #: The parts: an `nn.ModuleList` (so that they are submodules), typed as the features it holds.
    features: Sequence[InducingFeature]
    #: What the parts are for, in error messages ("part of a sum of kernels", "output").
    part_name = "part"

    def __init__(self, features: list[InducingFeature]) -> None:
        super().__init__()
        features = list(features)
        name = type(self).__name__
        if not features or not all(isinstance(f, InducingFeature) for f in features):
            raise TypeError(f"{name} takes a non-empty list of inducing features (one per "
                            f"{self.part_name})")
        if any(isinstance(f, type(self)) for f in features):
            raise TypeError(f"{name} features cannot be nested")
        self.features = cast("Sequence[InducingFeature]", nn.ModuleList(features))

    @property
    def blocks(self) -> list[int]:
        """M_i of every part."""
        return [f.num_inducing for f in self.features]

    @property
    def input_dim(self) -> int:
        """The largest of the parts' (a convolutional part's kernel fixes the image dimension)."""
        return max(f.input_dim for f in self.features)

    def config(self) -> dict[str, Any]:
        return {"type": type(self).__name__, "features": [f.config() for f in self.features]}

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> FeatureList:
        return cls([InducingFeature.registry.build(c) for c in cfg["features"]])

    def transformed(self, shift: Tensor, scale: Tensor) -> FeatureList:
        return type(self)([f.transformed(shift, scale) for f in self.features])

    @classmethod
    def from_data(cls, X: ArrayLike, num_inducing: int, *, seed: int = 0, **options: object
                  ) -> FeatureList:
        raise TypeError(f"build {cls.__name__} features from one inducing feature per "
                        f"{cls.part_name}: {cls.__name__}([InducingPoints(...), ...])")

    def extra_repr(self) -> str:
        return f"blocks={self.blocks}"
