"""`sparsegp experiment likelihoods`: the non-Gaussian likelihoods against the Gaussian
one (`experiment`
runs it)."""

from .experiment import build_parser, main, run

__all__ = ["build_parser", "main", "run"]
