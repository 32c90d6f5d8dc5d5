"""`sparsegp experiment bui2017`: Bui, Yan & Turner (2017), "A unifying framework for Gaussian
process pseudo-point approximations using Power Expectation Propagation" (`experiment` runs
it)."""

from .experiment import build_parser, main, run

__all__ = ["build_parser", "main", "run"]
