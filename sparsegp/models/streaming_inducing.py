"""The new inducing inputs b of a streaming update (`models.streaming`,
`models.streaming_svgp`)."""

from __future__ import annotations

import numbers
from typing import Any

import torch
from torch import Tensor

from ..features.inducing_points import InducingPoints
from ..features.initialisation import initial_inducing_inputs
from .inducing import resolve_feature


def new_feature(model: Any, inducing_points: Any, X: Tensor, Z_old: Tensor) -> InducingPoints:
    """The new inducing inputs b (internal units) of a streaming update of `model` (an SGPR or
    an SVGP): None or an int M chooses M inputs by seeded k-means++ from the old inducing
    inputs Z_old and the new batch X together; anything else means what it means at
    construction. Frozen old inducing inputs stay frozen."""
    spec = model.num_inducing if inducing_points is None else inducing_points
    if isinstance(spec, numbers.Integral) and not isinstance(spec, bool):
        pool = torch.cat([Z_old.to(X), X], 0)
        feature: Any = InducingPoints(initial_inducing_inputs(pool, int(spec), "kmeans++", 0,
                                                              rows="old inducing inputs and "
                                                              "new data points"))
    else:
        feature = resolve_feature(spec, model.kernel, X, model.x_shift, model.x_scale,
                                  "kmeans++", 0)
    if not isinstance(feature, InducingPoints):
        raise TypeError("streaming updates take inducing points (an int, an array [M, D] or "
                        f"InducingPoints); got {type(feature).__name__}")
    if not model.feature.Z.requires_grad:
        feature.Z.requires_grad_(False)
    return feature
