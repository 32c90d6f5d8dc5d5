"""`sparsegp experiment streaming`: streaming sparse GP regression (Bui, Nguyen & Turner 2017)
(`experiment` runs it)."""

from .experiment import build_parser, main, run

__all__ = ["build_parser", "main", "run"]
