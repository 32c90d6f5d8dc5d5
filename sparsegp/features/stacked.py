"""Separate inducing sets for the parts of a sum of kernels (van der Wilk 2018, §5.7.2). Data only.

f = Σ_i f_i with independent f_i ~ GP(0, k_i); the inducing variables are u = (u_1, …, u_I),
u_i defined by its own feature on f_i alone (inducing patches for a convolutional part,
inducing points for a squared-exponential part, …). Then Kuu is block diagonal and
Kuf = [K_{u_1 f}; …; K_{u_I f}] (`covariances/stacked.py`); q(u) may couple the blocks (SVGP's
default: one full covariance) or not (`SVGP(..., mean_field=True)`).
"""

from __future__ import annotations

from .collection import FeatureList


class Stacked(FeatureList):
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

    part_name = "part of a sum of kernels"

    @property
    def num_inducing(self) -> int:
        return sum(self.blocks)

    @property
    def width(self) -> int:
        return sum(f.width for f in self.features)
