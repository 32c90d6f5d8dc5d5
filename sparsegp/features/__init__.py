"""Inducing features (data only): what the inducing variables u are. Their covariances with a
kernel are registered in `sparsegp.covariances`; `InducingFeature` is the protocol."""

from .base import InducingFeature
from .inducing_points import InducingPoints

__all__ = ["InducingFeature", "InducingPoints"]
