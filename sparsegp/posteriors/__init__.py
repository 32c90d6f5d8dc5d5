"""Frozen posterior values: the factorisations are computed once, prediction only reads them.

A posterior holds detached copies of the kernel and inducing variables it was built with, so
changing or training the model afterwards never alters it (and never leaves it stale: the
model builds a new one). Prediction is O(M²) per test point for the sparse posterior, in
chunks of test points; no N*×N* matrix exists unless `full_cov=True`.
"""

from .base import Posterior, frozen, frozen_copy, tracking
from .exact import ConditionedExactPosterior, ExactPosterior, exact_posterior, restore_exact
from .features import FeatureBasis, FeaturePosterior, InterpolatedPosterior
from .sparse import (
    CoregionalPosterior,
    FantasySparsePosterior,
    SeparatePosterior,
    SparsePosterior,
)

__all__ = ["Posterior", "SparsePosterior", "CoregionalPosterior", "SeparatePosterior",
           "FantasySparsePosterior", "ExactPosterior", "ConditionedExactPosterior",
           "FeaturePosterior", "InterpolatedPosterior", "FeatureBasis", "tracking", "frozen",
           "frozen_copy", "exact_posterior", "restore_exact"]
