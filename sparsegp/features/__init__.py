"""Inducing features (data only): what the inducing variables u are. Their covariances with a
kernel are registered in `sparsegp.covariances`; `InducingFeature` is the protocol.

Shapes: a feature of M inducing variables for inputs X [N, D] gives `covariances.Kuu(feature,
kernel)` [M, M] and `covariances.Kuf(feature, kernel, X)` [M, N]. Pass one to a sparse model
as `inducing_points=` (in the units of X).

Example:

    >>> import numpy as np, sparsegp as sg
    >>> X, y = sg.datasets.snelson()
    >>> feature = sg.features.Multiscale(np.linspace(0, 6, 8)[:, None], scales=0.3)
    >>> m = sg.SGPR(X[::4], y[::4], inducing_points=feature)
    >>> type(m.feature).__name__, m.num_inducing, m.inducing_points.shape
    ('Multiscale', 8, (8, 1))
"""

from .base import InducingFeature
from .deltas import SumOfDeltas
from .fourier import Fourier
from .inducing_points import InducingPoints
from .multiscale import Multiscale
from .patches import InducingPatches, MultiChannelPatches
from .separate import Separate
from .stacked import Stacked

__all__ = ["InducingFeature", "InducingPoints", "Multiscale", "SumOfDeltas", "Fourier",
           "InducingPatches", "MultiChannelPatches", "Stacked", "Separate"]
