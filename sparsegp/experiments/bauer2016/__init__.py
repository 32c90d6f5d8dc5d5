"""`sparsegp experiment bauer2016`: Bauer, van der Wilk & Rasmussen (2016), "Understanding
probabilistic sparse Gaussian process approximations" (`experiment` runs it)."""

from .experiment import build_parser, main, run

__all__ = ["build_parser", "main", "run"]
