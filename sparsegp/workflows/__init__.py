"""Workflows built on the models (models never import them): greedy inducing-point selection."""

from .selection import SelectionCurve, select_inducing

__all__ = ["SelectionCurve", "select_inducing"]
