"""Pure objective functions of tensors: they never see model classes.

`exact` (the exact GP's evidence), `collapsed/` (the pseudo-point family for Gaussian
likelihoods: DTC, FITC, VFE, Power EP, blocks, several outputs, the upper bounds), `online/`
(the streaming bounds of new data given a summary of the old, and conditioning at fixed
hyperparameters), `latent/` (the random-input models: Ψ-statistics, the GP-LVM and GP-SSM
bounds, the Kalman filter, particle Gibbs), `svgp` (the uncollapsed bound),
`pep_classification` (Power EP's sites for other likelihoods), `parametric` (RFF and SSGP),
`interpolated` (KISS-GP) and `chunked` (sums over chunks of the data with hand-derived
gradients, O(B·M + M²) memory, which the others are built on).
"""

from .collapsed.members import (
    CollapsedProblem,
    collapsed_objective,
    family,
    titsias_upper_bound,
)
from .exact import exact_log_marginal_likelihood

__all__ = ["CollapsedProblem", "collapsed_objective", "family", "titsias_upper_bound",
           "exact_log_marginal_likelihood"]
