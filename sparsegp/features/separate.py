"""One inducing feature per output (or latent function), with a `kernels.Separate` kernel."""

from __future__ import annotations

from torch import Tensor

from .collection import FeatureList


class Separate(FeatureList):
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

    part_name = "output"

    @property
    def num_inducing(self) -> int:
        return max(self.blocks)

    @property
    def width(self) -> int:
        return max(f.width for f in self.features)

    def locations(self) -> Tensor | None:
        return None  # one set per output: read model.feature.features[p]

