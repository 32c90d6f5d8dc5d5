"""Is the approximation good? Sandwich bounds, health checks and inducing-variable gains.

`diagnose(model)` reports the objective, the VFE lower and Titsias upper bounds and plain-
language warnings (Bauer, van der Wilk & Rasmussen 2016); `inducing_gain` gives the change of
each objective term from adding one inducing point anywhere. Greedy growth of M until the
bounds meet is `sparsegp.select_inducing` (a workflow above the models).
"""

from .inducing_gain import InducingGain, ObjectiveTerms, inducing_gain, objective_terms
from .report import ApproximationWarning, Diagnostics, diagnose, warn_if_unhealthy
from .view import RegressionView

__all__ = [
    "Diagnostics", "diagnose", "warn_if_unhealthy", "ApproximationWarning", "InducingGain",
    "ObjectiveTerms", "inducing_gain", "objective_terms", "RegressionView",
]
