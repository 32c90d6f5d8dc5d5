"""Any linear-functional feature with a sum of kernels.

f = Σ_i f_i with independent f_i, so the covariances of u = ∫ f v add up over the parts
(each part needs its own registration with the feature)."""

from __future__ import annotations

from typing import cast

from torch import Tensor

from ..features.base import InducingFeature
from ..kernels.base import Sum
from .registry import Kuf, Kuu, register


@register("Kuu", InducingFeature, Sum, feature_subclasses=True)
def _kuu_sum(feature: InducingFeature, kernel: Sum) -> Tensor:
    return cast(Tensor, sum(Kuu(feature, k) for k in kernel.kernels))


@register("Kuf", InducingFeature, Sum, feature_subclasses=True)
def _kuf_sum(feature: InducingFeature, kernel: Sum, X: Tensor) -> Tensor:
    return cast(Tensor, sum(Kuf(feature, k, X) for k in kernel.kernels))
