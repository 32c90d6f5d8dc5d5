"""Kuu(feature, kernel) and Kuf(feature, kernel, X) for registered (feature, kernel) pairs,
and the chunked (chunk-at-a-time) Kuf of the objectives.

The registry (`registry.py`) dispatches on the pair; each feature's maths lives in a module
of its own here and registers itself on import.
"""

from ..moved import former
from . import (  # noqa: F401  (registrations)
    arccosine,
    changepoints,
    deltas,
    fourier,
    inducing_points,
    multiscale,
    patches,
    polynomial,
    rational_quadratic,
    separate,
    spectral_mixture,
    stacked,
    sums,
)
from .chunked import CrossCovariance, cross_covariance
from .registry import (
    Kuf,
    Kuu,
    Kuu_cholesky,
    check_pair,
    input_dim,
    lookup_chunked,
    register,
    width,
)
from .separate import separate_pairs

__all__ = ["Kuu", "Kuf", "Kuu_cholesky", "register", "check_pair", "input_dim", "width",
           "lookup_chunked", "CrossCovariance", "cross_covariance", "separate_pairs"]


def __getattr__(name: str) -> object:
    """Former names of this module (`sparsegp.moved`)."""
    return former(__name__, name)
