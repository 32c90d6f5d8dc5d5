"""The collapsed pseudo-point family for Gaussian likelihoods (Bui, Yan & Turner 2017; docs/
math.md §2): DTC, FITC, VFE and Power EP evaluated by one function (`family`), their block
(PITC-like) form (`blocks`), a noise variance per point (`heteroscedastic`), several outputs
through the linear model of coregionalisation (`coregional`), and the per-point sums they are
built from, chunk by chunk with hand-derived gradients (`sums`) or recomputed under autograd
(`recomputed`); the family itself is `members`."""

from .members import (
    APPROXIMATIONS,
    VFE,
    CollapsedProblem,
    Family,
    Solved,
    Statistics,
    collapsed_objective,
    factor_and_statistics,
    family,
    family_objective,
    family_terms,
    num_outputs,
    output_parts,
    posterior_q,
    q_from_statistics,
    residual,
    solve,
    statistics,
    targets,
    titsias_upper_bound,
    upper_bound_from_statistics,
    vfe_bounds,
)

__all__ = ["APPROXIMATIONS", "VFE", "CollapsedProblem", "Family", "Solved", "Statistics",
           "collapsed_objective", "factor_and_statistics", "family", "family_objective",
           "family_terms", "num_outputs", "output_parts", "posterior_q", "q_from_statistics",
           "residual", "solve", "statistics", "targets", "titsias_upper_bound",
           "upper_bound_from_statistics", "vfe_bounds"]
