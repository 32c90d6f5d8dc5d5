"""Independent outputs with a kernel and inducing variables each (`kernels.Separate`,
`features.Separate`): output p's Kuu and Kuf are those of (features[p], kernels[p]); the
models evaluate the parts one by one. Registered here: the stacked Cholesky factors
[P, M, M] (SVGP, equal M_p), the chunk width, and the parts' pairing check."""

from __future__ import annotations

import torch
from torch import Tensor

from ..features.base import InducingFeature
from ..features.separate import Separate as SeparateFeatures
from ..kernels.base import Kernel
from ..kernels.separate import Separate
from .registry import Kuu_cholesky, paired, register, width


def separate_pairs(feature: object, kernel: Kernel) -> list[tuple[InducingFeature, Kernel]] | None:
    """(feature_p, kernel_p) of every output for a `kernels.Separate` kernel, else None."""
    if not isinstance(kernel, Separate):
        return None
    if not isinstance(feature, SeparateFeatures):
        raise TypeError("kernels.Separate needs features.Separate inducing features (one per "
                        f"output); got {type(feature).__name__}")
    return paired(feature, kernel)


@register("width", SeparateFeatures, Separate)
def _width_separate(feature: SeparateFeatures, kernel: Separate) -> int:
    return max(width(f, k) for f, k in paired(feature, kernel))


@register("cholesky", SeparateFeatures, Separate)
def _cholesky_separate(feature: SeparateFeatures, kernel: Separate, jitter: float, name: str
                       ) -> tuple[Tensor, float]:
    if len(set(feature.blocks)) > 1:
        raise ValueError(f"stacked Cholesky factors need equal numbers of inducing variables per "
                         f"output; got {feature.blocks}")
    factors = [Kuu_cholesky(f, k, jitter, f"{name} of output {p}")
               for p, (f, k) in enumerate(paired(feature, kernel))]
    return torch.stack([L for L, _ in factors]), max(j for _, j in factors)
