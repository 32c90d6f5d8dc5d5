"""Inducing variables (data only): what u is. Their covariances are in `covariances.py`."""

from .inducing_points import InducingPoints

__all__ = ["InducingPoints"]
