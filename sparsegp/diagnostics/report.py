"""Is my approximation good? A report on a fitted GPR/SGPR (Bauer, van der Wilk & Rasmussen 2016).

At the model's current hyperparameters and inducing variables the report sandwiches the exact
log evidence (docs/math.md §3): the VFE lower bound (Titsias 2009) ≤ log p(y) ≤ the upper bound
(Titsias 2014). A FITC/PEP/DTC objective above the upper bound proves that it over-estimates
log p(y). It also checks the three failure modes Bauer et al. (2016) describe: a noise
variance collapsed towards zero (FITC; judged by the exact evidence as a function of σ², see
`noise`), inducing variables merged on top of each other (FITC's clumping: fewer effective
inducing variables than M), and inducing variables far from all data.
The checks work on a `RegressionView` that the model hands over (any inducing feature).
"""

from __future__ import annotations

import math
import numbers
import warnings
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import torch
from torch import Tensor

from ..distributed import (
    column_mean_std,
    count_rows,
    gathered_rows,
    global_sum,
    is_distributed,
    pooled_rows,
)
from ..features.base import InducingFeature
from ..features.inducing_points import InducingPoints
from ..linalg import JitterWarning
from ..objectives.collapsed.members import (
    CollapsedProblem,
    collapsed_objective,
    vfe_bounds,
)
from ..objectives.exact import exact_log_marginal_likelihood
from ..validation import positive_float, positive_int
from .bounds import QUADRATIC_MAX_DATA, quadratic_upper_bound
from .convergence import material_nats
from .noise import NoiseSupport, noise_warning, supported_noise
from .placement import inducing_placement, placement_warnings
from .precision import float32_discrepancy
from .streamed import StreamedNumbers, streamed_numbers
from .view import RegressionView, view_of


class ApproximationWarning(UserWarning):
    """`fit()` found a reason to distrust the approximation (see `diagnose`).

    Shapes: none (a `UserWarning` subclass). Filter it like any warning: "ignore" to silence
    it, "error" to stop at it; `model.diagnostics()` gives the full report.

    Example:

        >>> import warnings, sparsegp as sg
        >>> issubclass(sg.ApproximationWarning, UserWarning)
        True
        >>> X, y = sg.datasets.snelson()
        >>> m = sg.SGPR(X, y, inducing_points=3)  # far too few inducing points
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("error", sg.ApproximationWarning)
        ...     try:
        ...         sg.diagnostics.warn_if_unhealthy(m, gap_per_point=1e-6)
        ...     except sg.ApproximationWarning as w:
        ...         print(str(w).startswith("SGPR"))
        True
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore", sg.ApproximationWarning)
        ...     result = m.fit(maxiter=5)
    """


class Checked:
    """A report whose `warnings` list what tripped: `ok` when none did."""

    warnings: list[str]

    @property
    def ok(self) -> bool:
        """True when no check tripped."""
        return not self.warnings


@dataclass
class Diagnostics(Checked):
    """What `diagnose` found. Objectives are in the units of y (as `log_marginal_likelihood`).

    `exact` is log p(y) at the current hyperparameters when it was computed (always for GPR,
    for SGPR when N ≤ `exact_max_data`), else None. `gap` = upper_bound − lower_bound ≥ 0 at
    the model's own inducing variables; `certified_gap` uses the best upper bound (also the
    one with `tight_num_inducing` inducing variables: the model's plus data inputs; any
    inducing set gives a valid bound; and `quadratic_upper_bound`, computed with those when
    the others leave the gap open, N ≤ 20000 and the data are on one process: see
    `diagnostics.bounds`) — the gap the warning speaks of.
    `tight_lower_bound` is the VFE bound with those `tight_num_inducing` inducing variables:
    at least the lower bound (more inducing variables never lower it), and what it gains
    over the lower bound is a part of the true gap log p(y) − lower bound, proved.
    `noise_ratio` = σ² / var(y); `supported_noise` is the noise variance (units of y) that
    maximises the exact evidence at the fitted kernel, or for a sparse model on more than
    `exact_max_data` rows the log density of held-out rows (`diagnostics.noise`; None when it
    was not computed: several noise variances, or `exact_max_data=0`). `effective_num_inducing`
    counts groups of merged inducing variables (None for GPR); `merged_pairs` and
    `far_inducing` index them. For a streamed model (`StreamingSGPR`, a Gaussian
    `StreamingSVGP`) the evidence is that of the new batch given the summary of the data
    before it, N counts the new batch, and `notes` lists what was not computed and why
    (`diagnostics.streamed`). `float32_objective` is the objective evaluated in the model's
    float32 compute dtype (None for float64 work; everything else is float64).
    Shapes: floats and ints; `merged_pairs` a list of index pairs, `far_inducing` a list of
    indices into the M inducing variables, `warnings` a list of strings; `str(rep)` is a table.

    Example:

        >>> import sparsegp as sg
        >>> X, y = sg.datasets.snelson()
        >>> rep = sg.SGPR(X, y, inducing_points=10).diagnostics()
        >>> isinstance(rep, sg.Diagnostics), rep.approximation, rep.num_data
        (True, 'VFE', 200)
        >>> rep.lower_bound <= rep.exact <= rep.upper_bound, rep.gap >= 0
        (True, True)
        >>> print(str(rep).splitlines()[0])
        Diagnostics of SGPR (VFE, M = 10) on N = 200 points
    """

    model: str
    approximation: str
    num_data: int
    objective: float
    lower_bound: float
    upper_bound: float
    exact: float | None
    gap: float
    exceeds_upper_bound: bool
    noise_variance: float
    noise_ratio: float
    num_inducing: int | None
    effective_num_inducing: int | None
    tight_upper_bound: float | None = None
    tight_num_inducing: int | None = None
    tight_lower_bound: float | None = None
    merged_pairs: list[tuple[int, int]] = field(default_factory=list)
    far_inducing: list[int] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    supported_noise: float | None = None
    quadratic_upper_bound: float | None = None
    notes: list[str] = field(default_factory=list)
    float32_objective: float | None = None

    @property
    def best_upper_bound(self) -> float:
        return min(b for b in (self.upper_bound, self.tight_upper_bound,
                               self.quadratic_upper_bound) if b is not None)

    @property
    def certified_gap(self) -> float:
        """Best upper bound − VFE lower bound: how far log p(y) can be from the lower bound."""
        return self.best_upper_bound - self.lower_bound

    def __str__(self) -> str:
        N = self.num_data
        rows = [(f"objective ({self.approximation})", f"{self.objective:.4f}"),
                *([] if self.float32_objective is None else
                  [("objective in float32", f"{self.float32_objective:.4f}")]),
                ("VFE lower bound (Titsias 2009)", f"{self.lower_bound:.4f}"),
                ("exact log p(y)", "not computed" if self.exact is None else f"{self.exact:.4f}"),
                (f"upper bound (Titsias 2014), M = {self.num_inducing}"
                 if self.num_inducing is not None else "upper bound", f"{self.upper_bound:.4f}")]
        if self.tight_lower_bound is not None:
            rows.append((f"VFE lower bound with M = {self.tight_num_inducing}",
                         f"{self.tight_lower_bound:.4f}"))
        if self.tight_upper_bound is not None:
            rows.append((f"upper bound with M = {self.tight_num_inducing}",
                         f"{self.tight_upper_bound:.4f}"))
        if self.quadratic_upper_bound is not None:
            rows.append((f"quadratic-form upper bound, M = {self.tight_num_inducing}",
                         f"{self.quadratic_upper_bound:.4f}"))
        rows += [
            ("gap upper − lower (same M)", f"{self.gap:.4f}  ({self.gap / N:.4f} per data point)"),
            ("gap best upper − lower", f"{self.certified_gap:.4f}  "
                                       f"({self.certified_gap / N:.4f} per data point)"),
            ("objective above upper bound", "YES" if self.exceeds_upper_bound else "no"),
            ("noise variance", f"{self.noise_variance:.4g}  " + (
                f"({self.noise_ratio:.3g} × var(y))" if math.isfinite(self.noise_ratio)
                else "(y is constant)") + (
                f"; the data support {self.supported_noise:.4g}" if self.supported_noise
                is not None and self.noise_variance < 0.5 * self.supported_noise else ""))]
        if self.num_inducing is not None:
            rows += [("inducing variables M", f"{self.num_inducing}, effectively "
                      f"{self.effective_num_inducing} ({len(self.merged_pairs)} merged pairs)"),
                     ("inducing variables far from data", str(len(self.far_inducing)))]
        width = max(len(r[0]) for r in rows)
        lines = [f"Diagnostics of {self.model} on N = {N} points"]
        lines += [f"  {name.ljust(width)}  {value}" for name, value in rows]
        if self.notes:
            lines.append("notes:")
            lines += [f"  - {n}" for n in self.notes]
        if self.warnings:
            lines.append("warnings:")
            lines += [f"  - {w}" for w in self.warnings]
        else:
            lines.append("no warnings")
        return "\n".join(lines)


#: The thresholds of `diagnose`, by default (the models' `diagnostics()` take the same).
MERGE_FRACTION, FAR_LENGTHSCALES, NOISE_FRACTION, GAP_PER_POINT = 0.05, 3.0, 0.5, 0.1
#: The rows up to which `diagnose` computes the exact evidence, by default.
EXACT_MAX_DATA = 1000


def diagnose(
    model: object, *, merge_fraction: float = MERGE_FRACTION,
    far_lengthscales: float = FAR_LENGTHSCALES, noise_fraction: float = NOISE_FRACTION,
    gap_per_point: float = GAP_PER_POINT, exact_max_data: int = EXACT_MAX_DATA,
    extra_inducing: int | None = None, overestimate_nats: float | None = None,
    quadratic_max_data: int = QUADRATIC_MAX_DATA,
) -> Diagnostics:
    """Sandwich bounds and health checks of an SGPR (any approximation, any inducing feature),
    a GPR, or an SVGP with a Gaussian likelihood (its objective: the ELBO at its q(u)).

    At the model's own inducing variables no member of the family can exceed the upper bound
    (Λ ⪰ σ²I and t ≥ max d_n), so over-estimation is tested against a tighter bound too: the
    Titsias (2014) bound with the inducing variables plus `extra_inducing` data inputs drawn at
    random (seeded; default min(N, max(2M, 200))), valid because any inducing set gives an
    upper bound on log p(y) (Bauer et al. 2016 grow M the same way).

    Checks, each adding a plain-language string to `warnings` when it trips:
    * a non-VFE objective above that upper bound, or above the exact log evidence when that
      is computed (proof of over-estimation, Bauer et al. 2016), by more than
      `overestimate_nats` (default max(1, N/1000) nats: a smaller excess cannot move the
      hyperparameters materially, and Power EP with α < 1 exceeds log p(y) slightly by
      design);
    * a noise variance the data do not support: σ² below `noise_fraction` times the σ² that
      maximises the exact log evidence of all the rows at the fitted kernel, which is there
      more than 3 nats higher (`diagnostics.noise`; when N ≤ `exact_max_data`; beyond, a
      sparse model's σ² is judged by the log density of min(`exact_max_data`, N/5) held-out
      rows under its own predictor, a GPR's by the evidence of `exact_max_data` random
      rows; one noise variance only). A small σ² alone is no fault: a correct fit of
      nearly noise-free data recovers it, and the evidence is highest there;
    * an SVGP's ELBO more than `gap_per_point` · N nats below the VFE bound (the ELBO's
      maximum over q(u)): q(u) is far from its optimum;
    * best upper bound − lower bound > `gap_per_point` · N nats (the bounds do not certify
      that the VFE bound at these inducing variables is close to log p(y)); where the exact
      log p(y) is computed, log p(y) − lower bound decides instead (the upper bound is loose
      at small noise). Where neither is computed — N beyond `exact_max_data` and
      `quadratic_max_data` (the quadratic-form bound costs N² kernel evaluations: `fit()`
      computes it only where that costs no more than the fit's own kernel evaluations) —
      the bounds at hand are too loose to decide either way: the check then warns only when
      the gap is proved, the VFE bound with the tighter bound's inducing variables above the
      lower bound by more than `gap_per_point` · N nats, and otherwise says in `notes` what
      would decide;
    * (for FITC, DTC and Power EP; for VFE and an SVGP's ELBO only when the gap above trips,
      as merged or idle inducing variables cost these nothing but the work)
      pairs of inducing variables that have merged: inducing points closer than
      `merge_fraction` lengthscales (scaled distance, shortest lengthscale of any radial part
      of the kernel), or, for other kernels and features, correlated above
      exp(−merge_fraction²/2), what an SE kernel gives at that distance; reported as
      "effectively M = …";
    * inducing variables farther than `far_lengthscales` lengthscales (or their correlation
      equivalent) from every data point.
    The last three are skipped for block Power EP with one block of all the data and α = 1,
    which is the exact GP whatever the inducing variables.
    With data sharded over torch.distributed ranks (every rank calls this) the bounds,
    the exact evidence (every rank's rows gathered, N ≤ `exact_max_data`), var(y) and the
    distances to the data are those of all ranks' rows; the tighter bound's extra inputs are
    drawn from all ranks' rows.
    * (float32 compute dtype) the objective in float32 more than 1e-2 of its magnitude away
      from float64's (`diagnostics.precision`: float32 cannot resolve small noise variances).
    For a GPR the bounds equal the exact evidence; only the noise is checked. Everything else
    is evaluated in float64 whatever the model's `compute_dtype` (float32's ~1e-3 relative
    error would turn the checks' comparisons into noise).
    Cost: O(N (M + extra)²) for SGPR, plus O(n³) for the exact evidence and the noise check
    on n = min(N, `exact_max_data`) rows, plus N² kernel evaluations for the quadratic-form
    bound where it is computed (the bounds leave the gap open and N ≤ `quadratic_max_data`).
    """
    extra_inducing, overestimate_nats = _checked_thresholds(
        merge_fraction, far_lengthscales, noise_fraction, gap_per_point, extra_inducing,
        overestimate_nats, exact_max_data, quadratic_max_data)
    view, narrow = _in_float64(view_of(model))
    n = _numbers(view, extra_inducing, exact_max_data)
    rep = Diagnostics(n.view.label, n.view.approximation_name, n.view.num_data, n.objective,
                      n.lower, n.upper, n.exact, n.upper - n.lower, False,
                      n.view.noise_variance, n.noise_ratio, n.num_inducing, None, n.tight,
                      n.tight_num_inducing, n.tight_lower,
                      supported_noise=None if n.support is None
                      else n.support.supported * n.to_user)
    if n.streamed is not None:
        rep.notes = n.streamed.notes
    else:
        _add_quadratic_bound(rep, n, gap_per_point, quadratic_max_data)
        if narrow is not None:
            _check_float32(rep, n, narrow)
    _check_overestimation(rep, n, overestimate_nats)
    if n.support is not None and n.support.unsupported(noise_fraction):
        rep.warnings.append(noise_warning(n.support, n.to_user, n.view.num_data,
                                          n.problem is not None and n.problem.fam.mode == "pep"))
    _check_q(rep, n, gap_per_point)
    if n.problem is not None and not _exact_member(n.problem):  # the inducing variables matter
        gap_found = _check_gap(rep, n, gap_per_point, quadratic_max_data)
        # VFE (and an SVGP's ELBO) lose nothing by stacking spare inducing variables or
        # parking them away from the data: their placement is a finding only beside a gap;
        # a streamed model's data: the new batch and the old inducing inputs (the summary's)
        _check_inducing(n.view if n.streamed is None else replace(n.view, X=n.streamed.inputs),
                        rep, merge_fraction, far_lengthscales,
                        gap_found or n.problem.fam.mode != "vfe")
    return rep


# -- the sections of `diagnose` ------------------------------------------------------------
def _checked_thresholds(merge_fraction: float, far_lengthscales: float, noise_fraction: float,
                        gap_per_point: float, extra_inducing: int | None,
                        overestimate_nats: float | None, exact_max_data: int,
                        quadratic_max_data: int) -> tuple[int | None, float | None]:
    """The thresholds checked (ValueError naming a bad one); returns `extra_inducing` and
    `overestimate_nats` as numbers (or None: their defaults)."""
    for name, v in (("merge_fraction", merge_fraction), ("far_lengthscales", far_lengthscales),
                    ("noise_fraction", noise_fraction), ("gap_per_point", gap_per_point)):
        positive_float(v, name)
    for name, rows in (("exact_max_data", exact_max_data),
                       ("quadratic_max_data", quadratic_max_data)):
        if isinstance(rows, bool) or not isinstance(rows, numbers.Integral):
            raise ValueError(f"{name} must be an integer (0: never); got {rows!r}")
    return (None if extra_inducing is None else positive_int(extra_inducing, "extra_inducing"),
            None if overestimate_nats is None
            else positive_float(overestimate_nats, "overestimate_nats"))


def _in_float64(view: RegressionView) -> tuple[RegressionView, CollapsedProblem | None]:
    """The view with its problem in float64, and the problem in its float32 compute dtype
    (None for float64 work, or a model whose objective is its own), to check it against."""
    p = view.problem
    if p is None or p.compute_dtype is None:
        return view, None
    narrow = p if p.compute_dtype == torch.float32 and view.objective is None else None
    return replace(view, problem=p._replace(compute_dtype=None)), narrow


class _Numbers(NamedTuple):
    """What `diagnose` computes before it judges: objectives and bounds in the units of y,
    the noise support in internal units (`to_user` converts σ² to the units of y)."""

    view: RegressionView  # sharded data: `total_rows` of all ranks, σ² their mean
    sharded: bool  # the data are sharded over torch.distributed ranks (all ranks run this)
    noise: Tensor  # σ² (internal units): [] or one per point
    noise_ratio: float  # σ² / var(y)
    to_user: float
    objective: float
    lower: float
    upper: float
    exact: float | None
    tight: float | None  # the bounds with the tighter set's inducing variables
    tight_lower: float | None
    tight_feature: InducingFeature | None
    support: NoiseSupport | None
    streamed: StreamedNumbers | None

    @property
    def problem(self) -> CollapsedProblem | None:
        return self.view.problem

    @property
    def num_inducing(self) -> int | None:
        return None if self.problem is None else self.problem.feature.num_inducing

    @property
    def tight_num_inducing(self) -> int | None:
        return None if self.tight_feature is None else self.tight_feature.num_inducing


def _numbers(view: RegressionView, extra_inducing: int | None, exact_max_data: int
             ) -> _Numbers:
    """The objective, the bounds (at the model's inducing variables and with more), the exact
    evidence where N ≤ `exact_max_data`, and the noise the data support."""
    sharded = view.sharded and is_distributed()  # every rank runs this, collectives alike
    if sharded:
        view = replace(view, total_rows=count_rows(view.X, True))
    p, offset, noise = view.problem, view.offset, view.noise.detach()
    with torch.no_grad():
        if sharded:
            y_var = float(column_mean_std(view.y[:, None])[1][0]) ** 2
        else:
            y_var = float(view.y.var()) if view.num_data > 1 else 0.0
        noise_mean = float(noise.mean())
        if sharded and noise.dim() == 1:  # σ²_n of this rank's rows: the mean over all ranks'
            local, noise_mean = noise_mean, global_sum(float(noise.sum()), noise) / view.num_data
            view = replace(view, noise_variance=view.noise_variance * noise_mean / local)
        noise_ratio = noise_mean / y_var if y_var > 0 else float("inf")
        to_user = view.noise_variance / noise_mean if noise_mean > 0 else 1.0
        common = (view, sharded, noise, noise_ratio, to_user)
        if view.summary is not None:  # a streamed model: the new batch and the summary
            s = streamed_numbers(view, extra_inducing, exact_max_data)
            return _Numbers(*common, objective=s.objective, lower=s.lower, upper=s.upper,
                            exact=s.exact, tight=s.tight, tight_lower=s.tight_lower,
                            tight_feature=s.tight_feature, support=s.support, streamed=s)
        support = (supported_noise(view, noise, exact_max_data, sharded)
                   if noise.dim() == 0 and exact_max_data > 0 else None)
        if p is None:  # the exact GP: every bound is its evidence
            evidence = float(exact_log_marginal_likelihood(view.kernel.K(view.X), view.y, noise,
                                                           view.jitter)) + offset
            return _Numbers(*common, objective=evidence, lower=evidence, upper=evidence,
                            exact=evidence, tight=None, tight_lower=None, tight_feature=None,
                            support=support, streamed=None)
        # one pass over the data gives both bounds at the model's inducing variables
        lower, upper = (float(b) + offset for b in vfe_bounds(p))
        if view.objective is not None:  # the model's own (SVGP: the ELBO at its q(u))
            objective = view.objective + offset
        else:
            objective = lower if p.fam.mode == "vfe" else float(collapsed_objective(p)) + offset
        tight_lower, tight, tight_feature = _tight_bounds(view, extra_inducing)
        exact = None
        if view.num_data <= exact_max_data:
            X, y, rows_noise = ((view.X, view.y, noise) if not sharded else
                                gathered_rows(view.X, view.y, noise, "the exact GP's rows"))
            exact = float(exact_log_marginal_likelihood(view.kernel.K(X), y, rows_noise)) + offset
        return _Numbers(*common, objective=objective, lower=lower, upper=upper, exact=exact,
                        tight=tight, tight_lower=tight_lower, tight_feature=tight_feature,
                        support=support, streamed=None)


def _add_quadratic_bound(rep: Diagnostics, n: _Numbers, gap_per_point: float,
                         quadratic_max_data: int) -> None:
    """Titsias's bound is loose at small noise: where it leaves the gap open (and neither the
    exact evidence nor sharded data decide otherwise), the quadratic-form bound, O(N²), with
    the tighter set's inducing variables, for N ≤ `quadratic_max_data`."""
    p, N = n.problem, n.view.num_data
    if (p is None or n.tight_feature is None or n.exact is not None or n.sharded or n.noise.dim() != 0
            or N > quadratic_max_data or rep.certified_gap <= gap_per_point * N):
        return
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", JitterWarning)  # jitter only loosens the bound
        rep.quadratic_upper_bound = float(quadratic_upper_bound(
            p._replace(feature=n.tight_feature))) + n.view.offset


def _check_float32(rep: Diagnostics, n: _Numbers, narrow: CollapsedProblem) -> None:
    """The objective in the float32 compute dtype against float64's."""
    with torch.no_grad():
        rep.float32_objective = float(collapsed_objective(narrow)) + n.view.offset
    imprecise = float32_discrepancy(rep.float32_objective, n.objective)
    if imprecise is not None:
        rep.warnings.append(imprecise)


def _check_overestimation(rep: Diagnostics, n: _Numbers, overestimate_nats: float | None
                          ) -> None:
    """A non-VFE objective above the best upper bound, or above the exact evidence, by more
    than `overestimate_nats` (default: the material nats of N points)."""
    p, objective, exact = n.problem, n.objective, n.exact
    best_upper = rep.best_upper_bound
    tol = 1e-6 * (1.0 + abs(best_upper))
    rep.exceeds_upper_bound = p is not None and p.fam.mode != "vfe" and objective > best_upper + tol
    material = (material_nats(n.view.num_data) if overestimate_nats is None
                else overestimate_nats)
    approximation = rep.approximation
    if rep.exceeds_upper_bound and objective > best_upper + material:
        rep.warnings.append(
            f"the {approximation} objective {objective:.6g} exceeds an upper bound "
            f"{best_upper:.6g} on the exact log evidence by {objective - best_upper:.3g} nats: "
            "it provably over-estimates log p(y) at "
            "these hyperparameters, so they are not to be trusted (Bauer et al. 2016); compare "
            "with approximation='vfe'")
    elif (p is not None and p.fam.mode != "vfe" and exact is not None
          and objective > exact + max(tol, material)):
        rep.warnings.append(
            f"the {approximation} objective {objective:.6g} exceeds the exact log evidence "
            f"{exact:.6g} at these hyperparameters by {objective - exact:.3g} nats: it "
            "over-estimates log p(y), and fitting it favours the wrong hyperparameters")


def _check_q(rep: Diagnostics, n: _Numbers, gap_per_point: float) -> None:
    """A model's own objective (an SVGP's ELBO at its q(u)) far below the VFE bound, its
    maximum over q(u)."""
    view, objective, lower = n.view, n.objective, n.lower
    if view.objective is not None and lower - objective > gap_per_point * view.num_data:
        rep.warnings.append(
            f"the {rep.approximation} {objective:.6g} is {lower - objective:.3g} nats "
            f"({(lower - objective) / view.num_data:.3g} per data point) below the VFE bound "
            f"{lower:.6g}, its maximum over q(u) at these hyperparameters: q(u) is far from its "
            f"optimum ({view.objective_remedy or 'train longer'})")


def _check_gap(rep: Diagnostics, n: _Numbers, gap_per_point: float, quadratic_max_data: int
               ) -> bool:
    """The gap between the VFE bound and log p(y): a warning where it is proved larger than
    `gap_per_point` · N nats, a note where the bounds at hand cannot decide. Returns whether
    a gap was found (the placement of the inducing variables is then a finding too)."""
    N, exact, lower = n.view.num_data, n.exact, n.lower
    certified = rep.certified_gap  # any upper bound certifies the lower bound
    # where log p(y) itself is known, the true gap decides (an upper bound is loose at
    # small noise: a good fit of nearly noise-free data is never certified by it)
    gap = certified if exact is None else exact - lower
    threshold = gap_per_point * N
    if gap <= threshold:
        return False
    # the bounds at hand cannot decide where the quadratic-form bound was left out for
    # its cost: warn only if more inducing variables prove the gap (`tight_lower_bound`)
    proved = None if n.tight_lower is None else n.tight_lower - lower
    if (exact is None and n.streamed is None and rep.quadratic_upper_bound is None
            and not n.sharded and n.noise.dim() == 0 and N > quadratic_max_data
            and (proved is None or proved <= threshold)):
        rep.notes.append(
            f"the VFE lower bound and the best upper bound computed are {certified:.3g} "
            f"nats apart ({certified / N:.3g} per data point), too loose to "
            f"decide whether the approximation is close to the exact GP; "
            + ("" if proved is None else f"M = {rep.tight_num_inducing} inducing variables "
               f"raise the lower bound by {proved:.3g} nats; ")
            + f"the quadratic-form upper bound (N² = {N ** 2:.3g} kernel "
            f"evaluations) decides: model.diagnostics(quadratic_max_data={N})")
        return False
    best = rep.best_upper_bound
    which = ("the quadratic-form upper bound" if best == rep.quadratic_upper_bound
             else f"the upper bound with M = {rep.tight_num_inducing}"
             if best == rep.tight_upper_bound else "the upper bound")
    known = ("" if exact is None else f", and log p(y) itself is {gap:.3g} nats "
             f"({gap / N:.3g} per data point) above the lower bound")
    if exact is None and proved is not None and proved > threshold:
        known = (f", and M = {rep.tight_num_inducing} inducing variables raise the lower bound "
                 f"by {proved:.3g} nats")
    rep.warnings.append(
        f"the VFE lower bound and {which} are {certified:.3g} nats apart "
        f"({certified / N:.3g} per data point){known}: the approximation "
        "is not certified to be close to the exact GP; add inducing variables "
        "(sparsegp.select_inducing)")
    return True


def _exact_member(p: CollapsedProblem) -> bool:
    """Block Power EP with one block of all the data and α = 1: the exact GP, whatever the
    inducing variables (their gap and placement say nothing about it)."""
    b = p.blocks
    return b is not None and b.num_blocks == 1 and bool((b.alpha == 1).all())


def _tight_bounds(view: RegressionView, extra: int | None) -> tuple[float, float, Any]:
    """The VFE bound and the Titsias (2014) bound with the model's inducing variables plus
    `extra` random data inputs (or with data inputs alone, M + extra of them, for a feature
    that cannot be extended by points); with sharded data, drawn from the rows of all ranks.
    Returns both bounds (units of y) and that inducing feature. Any inducing set gives a
    lower and an upper bound on log p(y)."""
    p = view.problem
    assert p is not None  # diagnose asks for it for sparse models only
    N, M = view.num_data, p.feature.num_inducing
    extra = min(N, max(2 * M, 200)) if extra is None else min(N, int(extra))
    rows = view.X
    if view.total_rows is not None:  # sharded: a sample of every rank's rows, alike on all
        (rows,) = pooled_rows([view.X], M + extra, 0, "the inputs of the tighter bound")
    N = rows.shape[0]
    g = torch.Generator().manual_seed(0)
    idx = torch.randperm(N, generator=g)[:min(N, extra)].to(rows.device)
    try:
        feature = p.feature.extended(rows[idx]) if extra > 0 else p.feature
    except TypeError:
        idx = torch.randperm(N, generator=g)[:min(N, M + extra)].to(rows.device)
        feature = InducingPoints(rows[idx])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", JitterWarning)  # jitter only loosens the bound
        lower, upper = vfe_bounds(p._replace(feature=feature))
    return float(lower) + view.offset, float(upper) + view.offset, feature


def quadratic_rows_after_fit(evaluations: int, num_inducing: int) -> int:
    """The `quadratic_max_data` of the checks after a fit of `evaluations` objective
    evaluations with M = `num_inducing` inducing variables: the quadratic-form bound's N²
    kernel evaluations are at most the N·M of Kuf that each evaluation of the fit took,
    N ≤ evaluations·M (and `QUADRATIC_MAX_DATA`), so that checking costs no more than
    fitting. friedman1 (N = 2·10⁴, M = 100), stopped after about 25 evaluations, is checked
    without it (5.6 s of bound against 1.3 s of fit, one thread); kin40k (N = 10⁴, over
    1,000 evaluations) with it."""
    return min(QUADRATIC_MAX_DATA, int(evaluations) * int(num_inducing))


def warn_if_unhealthy(model: object, stacklevel: int = 3, **kwargs: Any) -> Diagnostics | None:
    """Run `diagnose` and issue one `ApproximationWarning` listing what tripped (for `fit`).

    Never raises an error: a check that cannot be computed becomes a warning that says what
    failed and how to rerun it, and the fitted model is kept. Ctrl-C is left to the fit's
    guard (`training.guard`), whose result then says `interrupted`.
    """
    try:
        rep = diagnose(model, **kwargs)
    except Exception as err:  # noqa: BLE001 - a check must never throw a fit away
        warnings.warn(f"{type(model).__name__}: the checks after fitting could not be computed "
                      f"({type(err).__name__}: {err}); the fitted model is kept. Rerun them with "
                      "model.diagnostics(), or skip them with fit(diagnose=False)",
                      ApproximationWarning, stacklevel=stacklevel)
        return None
    if rep.warnings:
        text = "; ".join(rep.warnings)
        warnings.warn(f"{rep.model}: {text}. See model.diagnostics().", ApproximationWarning,
                      stacklevel=stacklevel)
    return rep


def _check_inducing(view: RegressionView, rep: Diagnostics, merge_fraction: float,
                    far_lengthscales: float, warn: bool) -> None:
    assert view.problem is not None  # diagnose checks the inducing variables of sparse models
    feature = view.problem.feature
    placement = inducing_placement(feature, view.kernel, view.X, merge_fraction,
                                   far_lengthscales, view.total_rows is not None)
    rep.merged_pairs = placement.merged_pairs
    rep.effective_num_inducing = placement.effective
    rep.far_inducing = placement.far
    why = ("merged ones count as one: spread over the data, they would narrow the gap"
           if view.problem.fam.mode == "vfe" else
           "FITC and Power EP clump inducing inputs like this, Bauer et al. 2016")
    if warn:
        rep.warnings += placement_warnings(placement, feature.num_inducing, merge_fraction,
                                           far_lengthscales, why)
