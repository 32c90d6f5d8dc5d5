"""Pure objective functions of tensors: they never see model classes."""

from .collapsed import CollapsedProblem, collapsed_objective, family, titsias_upper_bound
from .exact import exact_log_marginal_likelihood

__all__ = ["CollapsedProblem", "collapsed_objective", "family", "titsias_upper_bound",
           "exact_log_marginal_likelihood"]
