"""Is my approximation good? A report on a fitted GPR/SGPR (Bauer, van der Wilk & Rasmussen 2016).

At the model's current hyperparameters and inducing variables the report sandwiches the exact
log evidence (MATH.md §3): the VFE lower bound (Titsias 2009) ≤ log p(y) ≤ the upper bound
(Titsias 2014). A FITC/PEP/DTC objective above the upper bound proves that it over-estimates
log p(y). It also checks the three failure modes Bauer et al. (2016) describe: a noise
variance collapsed towards zero (FITC), inducing variables merged on top of each other (FITC's
clumping: fewer effective inducing variables than M), and inducing variables far from all data.
The checks work on a `RegressionView` that the model hands over (any inducing feature).
"""

from __future__ import annotations

import math
import numbers
import warnings
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple, cast

import torch
from torch import Tensor

from .. import covariances as cov
from ..chunking import chunk_slices
from ..distributed import (
    all_reduce_,
    column_mean_std,
    count_rows,
    gathered_rows,
    global_sum,
    is_distributed,
    pooled_rows,
)
from ..features.inducing_points import InducingPoints
from ..kernels.base import Kernel
from ..kernels.stationary import RadialKernel, Stationary
from ..linalg import JitterWarning
from ..objectives.collapsed import (
    VFE,
    collapsed_objective,
    factor_and_statistics,
    family_objective,
    solve,
    titsias_upper_bound,
    upper_bound_from_statistics,
)
from ..objectives.exact import exact_log_marginal_likelihood
from ..validation import positive_float, positive_int
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
    inducing set gives a valid bound) — the gap the warning speaks of.
    `noise_ratio` = σ² / var(y). `effective_num_inducing` counts groups of merged inducing
    variables (None for GPR); `merged_pairs` and `far_inducing` index them.
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
    merged_pairs: list[tuple[int, int]] = field(default_factory=list)
    far_inducing: list[int] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def best_upper_bound(self) -> float:
        return self.upper_bound if self.tight_upper_bound is None else min(
            self.upper_bound, self.tight_upper_bound)

    @property
    def certified_gap(self) -> float:
        """Best upper bound − VFE lower bound: how far log p(y) can be from the lower bound."""
        return self.best_upper_bound - self.lower_bound

    def __str__(self) -> str:
        N = self.num_data
        rows = [(f"objective ({self.approximation})", f"{self.objective:.4f}"),
                ("VFE lower bound (Titsias 2009)", f"{self.lower_bound:.4f}"),
                ("exact log p(y)", "not computed" if self.exact is None else f"{self.exact:.4f}"),
                (f"upper bound (Titsias 2014), M = {self.num_inducing}"
                 if self.num_inducing is not None else "upper bound", f"{self.upper_bound:.4f}")]
        if self.tight_upper_bound is not None:
            rows.append((f"upper bound with M = {self.tight_num_inducing}",
                         f"{self.tight_upper_bound:.4f}"))
        rows += [
            ("gap upper − lower (same M)", f"{self.gap:.4f}  ({self.gap / N:.4f} per data point)"),
            ("gap best upper − lower", f"{self.certified_gap:.4f}  "
                                       f"({self.certified_gap / N:.4f} per data point)"),
            ("objective above upper bound", "YES" if self.exceeds_upper_bound else "no"),
            ("noise variance", f"{self.noise_variance:.4g}  " + (
                f"({self.noise_ratio:.3g} × var(y))" if math.isfinite(self.noise_ratio)
                else "(y is constant)"))]
        if self.num_inducing is not None:
            rows += [("inducing variables M", f"{self.num_inducing}, effectively "
                      f"{self.effective_num_inducing} ({len(self.merged_pairs)} merged pairs)"),
                     ("inducing variables far from data", str(len(self.far_inducing)))]
        width = max(len(r[0]) for r in rows)
        lines = [f"Diagnostics of {self.model} on N = {N} points"]
        lines += [f"  {name.ljust(width)}  {value}" for name, value in rows]
        if self.warnings:
            lines.append("warnings:")
            lines += [f"  - {w}" for w in self.warnings]
        else:
            lines.append("no warnings")
        return "\n".join(lines)


def diagnose(
    model: Any, *, merge_fraction: float = 0.05, far_lengthscales: float = 3.0,
    noise_fraction: float = 1e-3, gap_per_point: float = 0.1, exact_max_data: int = 1000,
    extra_inducing: int | None = None,
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
      is computed (proof of over-estimation, Bauer et al. 2016);
    * σ² < `noise_fraction` · var(y) (a collapsed noise variance);
    * an SVGP's ELBO more than `gap_per_point` · N nats below the VFE bound (the ELBO's
      maximum over q(u)): q(u) is far from its optimum;
    * best upper bound − lower bound > `gap_per_point` · N nats (the bounds do not certify
      that the VFE bound at these inducing variables is close to log p(y));
    * pairs of inducing variables that have merged: inducing points closer than
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
    For a GPR the bounds equal the exact evidence; only the noise is checked. Everything is
    evaluated in float64 whatever the model's `compute_dtype` (float32's ~1e-3 relative
    error would turn the checks' comparisons into noise).
    Cost: O(N (M + extra)²) for SGPR, plus O(N³) for the exact evidence when
    N ≤ `exact_max_data`.
    """
    for name, v in (("merge_fraction", merge_fraction), ("far_lengthscales", far_lengthscales),
                    ("noise_fraction", noise_fraction), ("gap_per_point", gap_per_point)):
        positive_float(v, name)
    if extra_inducing is not None:
        extra_inducing = positive_int(extra_inducing, "extra_inducing")
    if isinstance(exact_max_data, bool) or not isinstance(exact_max_data, numbers.Integral):
        raise ValueError(f"exact_max_data must be an integer (0: never); got {exact_max_data!r}")
    view = view_of(model)
    if view.problem is not None and view.problem.compute_dtype is not None:
        view = replace(view, problem=view.problem._replace(compute_dtype=None))  # float64
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
        if p is not None:
            # one pass over the data gives both bounds at the model's inducing variables
            vp = p._replace(fam=VFE, blocks=None)
            L, _, vfe = factor_and_statistics(vp)
            lower = float(family_objective(vfe, solve(vfe))) + offset
            upper = float(upper_bound_from_statistics(vfe, vp, L)) + offset
            if view.objective is not None:  # the model's own (SVGP: the ELBO at its q(u))
                objective = view.objective + offset
            else:
                objective = (lower if p.fam.mode == "vfe"
                             else float(collapsed_objective(p)) + offset)
            tight, tight_m = _tight_upper_bound(view, extra_inducing)
            exact = None
            if view.num_data <= exact_max_data:
                X, y, noise_rows = ((view.X, view.y, noise) if not sharded else
                                    gathered_rows(view.X, view.y, noise, "the exact GP's rows"))
                exact = float(exact_log_marginal_likelihood(view.kernel.K(X), y,
                                                            noise_rows)) + offset
        else:
            lower = upper = exact = objective = float(exact_log_marginal_likelihood(
                view.kernel.K(view.X), view.y, noise, view.jitter)) + offset
            tight, tight_m = None, None
    approximation = view.approximation_name
    M = None if p is None else p.feature.num_inducing
    rep = Diagnostics(view.label, approximation, view.num_data, objective, lower, upper, exact,
                      upper - lower, False, view.noise_variance, noise_ratio, M, None, tight,
                      tight_m)
    best_upper = rep.best_upper_bound
    tol = 1e-6 * (1.0 + abs(best_upper))
    rep.exceeds_upper_bound = p is not None and p.fam.mode != "vfe" and objective > best_upper + tol
    if rep.exceeds_upper_bound:
        rep.warnings.append(
            f"the {approximation} objective {objective:.6g} exceeds an upper bound "
            f"{best_upper:.6g} on the exact log evidence by {objective - best_upper:.3g} nats: "
            "it provably over-estimates log p(y) at "
            "these hyperparameters, so they are not to be trusted (Bauer et al. 2016); compare "
            "with approximation='vfe'")
    elif p is not None and p.fam.mode != "vfe" and exact is not None and objective > exact + tol:
        rep.warnings.append(
            f"the {approximation} objective {objective:.6g} exceeds the exact log evidence "
            f"{exact:.6g} at these hyperparameters by {objective - exact:.3g} nats: it "
            "over-estimates log p(y), and fitting it favours the wrong hyperparameters")
    if noise_ratio < noise_fraction:
        hint = ("FITC and Power EP with α near 1 are known to drive the noise towards zero "
                "(Bauer et al. 2016); prefer approximation='vfe'" if p is not None
                and p.fam.mode != "vfe" else
                "unless the data are nearly noise-free the model is interpolating noise")
        rep.warnings.append(
            f"the noise variance {view.noise_variance:.3g} is only {noise_ratio:.2g} of var(y): "
            f"it has collapsed towards zero; {hint}")
    if view.objective is not None and lower - objective > gap_per_point * view.num_data:
        rep.warnings.append(
            f"the {approximation} {objective:.6g} is {lower - objective:.3g} nats "
            f"({(lower - objective) / view.num_data:.3g} per data point) below the VFE bound "
            f"{lower:.6g}, its maximum over q(u) at these hyperparameters: q(u) is far from its "
            f"optimum ({view.objective_remedy or 'train longer'})")
    if p is not None and not _exact_member(p):  # the inducing variables matter
        certified = rep.certified_gap  # any upper bound certifies the lower bound
        if certified > gap_per_point * view.num_data:
            which = (f"the upper bound with M = {tight_m}" if tight is not None and tight < upper
                     else "the upper bound")
            rep.warnings.append(
                f"the VFE lower bound and {which} are {certified:.3g} nats apart "
                f"({certified / view.num_data:.3g} per data point): the approximation is not "
                "certified to be close to the exact GP; add inducing variables "
                "(sparsegp.select_inducing)")
        _check_inducing(view, rep, merge_fraction, far_lengthscales)
    return rep


def _exact_member(p: Any) -> bool:
    """Block Power EP with one block of all the data and α = 1: the exact GP, whatever the
    inducing variables (their gap and placement say nothing about it)."""
    b = p.blocks
    return b is not None and b.num_blocks == 1 and bool((b.alpha == 1).all())


def _tight_upper_bound(view: RegressionView, extra: int | None) -> tuple[float, int]:
    """The Titsias (2014) bound with the model's inducing variables plus `extra` random data
    inputs (or with data inputs alone, M + extra of them, for a feature that cannot be
    extended by points); with sharded data, drawn from the rows of all ranks."""
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
        U = titsias_upper_bound(p._replace(feature=feature))
    return float(U) + view.offset, feature.num_inducing


def warn_if_unhealthy(model: Any, stacklevel: int = 3, **kwargs: Any) -> Diagnostics | None:
    """Run `diagnose` and issue one `ApproximationWarning` listing what tripped (for `fit`).

    Never raises: a check that cannot be computed becomes a warning that says what failed and
    how to rerun it, and the fitted model is kept.
    """
    try:
        rep = diagnose(model, **kwargs)
    except KeyboardInterrupt:
        warnings.warn(f"{type(model).__name__}: the checks after fitting were interrupted; the "
                      "fitted model is kept (run model.diagnostics() to check it)",
                      ApproximationWarning, stacklevel=stacklevel)
        return None
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


def shortest_lengthscale(kernel: Kernel) -> Tensor | None:
    """Elementwise shortest lengthscale ([] or [D]) over the radial parts of a kernel.

    None when there is none, or when another stationary part (periodic) has a lengthscale
    that is not a distance in input units: compare correlations instead.
    """
    ell = None
    for part in kernel.modules():
        if isinstance(part, Stationary) and not isinstance(part, RadialKernel):
            return None
        if isinstance(part, RadialKernel):
            v = part.value("lengthscale").detach()
            ell = v if ell is None else torch.minimum(ell, v)
    return ell


class Placement(NamedTuple):
    """Where the inducing variables sit: `merged_pairs` (index pairs closer than the merge
    threshold), `effective` (groups of merged ones counted once), `far` (indices farther than
    the threshold from every data point), and the `unit` the thresholds were measured in."""

    merged_pairs: list[tuple[int, int]]
    effective: int
    far: list[int]
    unit: str


def inducing_placement(feature: Any, kernel: Kernel, X: Tensor, merge_fraction: float,
                       far_lengthscales: float, over_ranks: bool = False) -> Placement:
    """Merged and far inducing variables (`diagnose`'s last two checks): scaled distances
    for inducing points under a radial kernel (shortest lengthscale), correlations otherwise.
    Shapes: X [N, D] (internal units, as the feature's); `over_ranks`: X is this rank's shard
    of data sharded over processes (distances to every rank's rows)."""
    ell = shortest_lengthscale(kernel) if isinstance(feature, InducingPoints) else None
    M = feature.num_inducing
    rows = max(1, 2**20 // M)
    with torch.no_grad():
        if ell is not None:  # inducing points and a radial kernel: scaled distances
            Z = cast(InducingPoints, feature).Z.detach() / ell
            close = torch.cdist(Z, Z) < merge_fraction
            nearest = torch.full((M,), float("inf"), dtype=Z.dtype, device=Z.device)
            for s in chunk_slices(X.shape[0], rows):
                nearest = torch.minimum(nearest, torch.cdist(Z, X[s] / ell).min(1).values)
            if over_ranks:
                all_reduce_([nearest], "distances to the data", op="min")
            far = nearest > far_lengthscales
            unit = "lengthscales"
        else:  # correlations of the inducing variables, with those of an SE kernel at that distance
            Kuu = cov.Kuu(feature, kernel)
            sd = torch.sqrt(torch.diagonal(Kuu).clamp_min(1e-300))
            close = Kuu / (sd[:, None] * sd[None, :]) > math.exp(-0.5 * merge_fraction**2)
            best = torch.zeros(M, dtype=Kuu.dtype, device=Kuu.device)
            for s in chunk_slices(X.shape[0], rows):
                kd = torch.sqrt(kernel.K_diag(X[s]).clamp_min(1e-300))
                corr = cov.Kuf(feature, kernel, X[s]).abs() / (sd[:, None] * kd[None, :])
                best = torch.maximum(best, corr.max(1).values)
            if over_ranks:
                all_reduce_([best], "correlations with the data", op="max")
            far = best < math.exp(-0.5 * far_lengthscales**2)
            unit = "lengthscale-equivalents (by correlation)"
    pairs = [(i, j) for i, j in torch.nonzero(torch.triu(close, 1)).tolist()]
    parent = list(range(M))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, j in pairs:
        parent[root(i)] = root(j)
    return Placement(pairs, len({root(i) for i in range(M)}),
                     torch.nonzero(far).flatten().tolist(), unit)


def placement_warnings(placement: Placement, M: int, merge_fraction: float,
                       far_lengthscales: float, why: str) -> list[str]:
    """The warnings of a `Placement` (`why`: what makes this approximation merge them)."""
    out = []
    pairs, far = placement.merged_pairs, placement.far
    if pairs:
        out.append(
            f"{len(pairs)} {'pairs' if len(pairs) > 1 else 'pair'} of inducing variables "
            f"{'are' if len(pairs) > 1 else 'is'} closer than {merge_fraction:g} "
            f"{placement.unit}: they have merged, so effectively M = {placement.effective} of "
            f"{M} ({why})")
    if far:
        out.append(
            f"{len(far)} inducing {'variables are' if len(far) > 1 else 'variable is'} "
            f"farther than {far_lengthscales:g} {placement.unit} from every data point (rows "
            f"{far[:10]}{'…' if len(far) > 10 else ''}): they explain no data")
    return out


def _check_inducing(view: RegressionView, rep: Diagnostics, merge_fraction: float,
                    far_lengthscales: float) -> None:
    assert view.problem is not None  # diagnose checks the inducing variables of sparse models
    feature = view.problem.feature
    placement = inducing_placement(feature, view.kernel, view.X, merge_fraction,
                                   far_lengthscales, view.total_rows is not None)
    rep.merged_pairs = placement.merged_pairs
    rep.effective_num_inducing = placement.effective
    rep.far_inducing = placement.far
    why = ("VFE stacks spare inducing inputs on top of each other when fewer suffice"
           if view.problem.fam.mode == "vfe" else
           "FITC and Power EP clump inducing inputs like this, Bauer et al. 2016")
    rep.warnings += placement_warnings(placement, feature.num_inducing, merge_fraction,
                                       far_lengthscales, why)
