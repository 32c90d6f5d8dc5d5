"""`sparsegp experiment randominputs`: GP models with random inputs (van der Wilk 2018,
ch. 6): the Bayesian GP-LVM and the GP state-space model (`experiment` runs it)."""

from .experiment import build_parser, main, run

__all__ = ["build_parser", "main", "run"]
