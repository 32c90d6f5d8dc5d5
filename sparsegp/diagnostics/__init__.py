"""Is the approximation good? Sandwich bounds, health checks and inducing-input selection.

`diagnose(model)` reports the objective, the VFE lower and Titsias upper bounds and plain-
language warnings (Bauer, van der Wilk & Rasmussen 2016); `inducing_gain` gives the change of
each objective term from adding one inducing input anywhere; `select_inducing` grows M
greedily until the bounds meet.
"""

from .inducing_gain import InducingGain, ObjectiveTerms, inducing_gain, objective_terms
from .report import ApproximationWarning, Diagnostics, diagnose, warn_if_unhealthy
from .selection import SelectionCurve, select_inducing

__all__ = [
    "Diagnostics", "diagnose", "warn_if_unhealthy", "ApproximationWarning", "InducingGain",
    "ObjectiveTerms", "inducing_gain", "objective_terms", "SelectionCurve", "select_inducing",
]
