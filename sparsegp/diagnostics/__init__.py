"""Is the approximation good? Sandwich bounds, health checks and inducing-variable gains.

`diagnose(model)` reports the objective, the VFE lower and Titsias upper bounds and plain-
language warnings (Bauer, van der Wilk & Rasmussen 2016); `inducing_gain` gives the change of
each objective term from adding one inducing point anywhere; `diagnose_latent` reports on
models with a non-Gaussian likelihood (SGPC, SVGP), where no upper bound exists. Greedy growth of M until the
bounds meet is `sparsegp.select_inducing` (a workflow above the models).

Shapes: `diagnose(model)` of a GPR/SGPR on X [N, D], y [N] -> a `Diagnostics` report (floats);
`inducing_gain(model, candidates [C, D])` -> an `InducingGain` with one gain per candidate [C].
`ConvergenceWarning` is what `fit()` gives when it stopped at its iteration or round limit.

Example:

    >>> import sparsegp as sg
    >>> X, y = sg.datasets.snelson()
    >>> m = sg.SGPR(X, y, inducing_points=10)
    >>> rep = sg.diagnostics.diagnose(m)
    >>> rep.lower_bound <= rep.upper_bound, rep.num_inducing
    (True, 10)
    >>> gain = sg.diagnostics.inducing_gain(m, X[:7])
    >>> gain.total.shape
    (7,)
"""

from .convergence import ConvergenceWarning
from .inducing_gain import InducingGain, ObjectiveTerms, inducing_gain, objective_terms
from .latent import LatentDiagnostics, LatentView, diagnose_latent
from .report import (
    ApproximationWarning,
    Diagnostics,
    diagnose,
    quadratic_rows_after_fit,
    warn_if_unhealthy,
)
from .view import RegressionView

__all__ = [
    "Diagnostics", "diagnose", "warn_if_unhealthy", "quadratic_rows_after_fit",
    "ApproximationWarning", "InducingGain", "ObjectiveTerms", "inducing_gain", "objective_terms",
    "RegressionView", "LatentDiagnostics", "LatentView", "diagnose_latent", "ConvergenceWarning",
]
