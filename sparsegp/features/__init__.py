"""Inducing features (data only): what the inducing variables u are. Their covariances with a
kernel are registered in `sparsegp.covariances`; `InducingFeature` is the protocol."""

from .base import InducingFeature
from .deltas import SumOfDeltas
from .fourier import Fourier
from .inducing_points import InducingPoints
from .multiscale import Multiscale
from .patches import InducingPatches, MultiChannelPatches
from .stacked import Stacked

__all__ = ["InducingFeature", "InducingPoints", "Multiscale", "SumOfDeltas", "Fourier",
           "InducingPatches", "MultiChannelPatches", "Stacked"]
