"""Grow M greedily until the VFE lower bound and the Titsias upper bound meet.

Each step adds the candidate input with the largest gain of the VFE objective, computed for
all candidates at once by the rank-one update of docs/math.md §3 (`inducing_gain`) without
refitting; that the bound can only improve is what makes greedy growth safe (Titsias 2009;
Bauer, van der Wilk & Rasmussen 2016). The stopping rule uses the certificate
F_VFE ≤ log p(y) ≤ U (Titsias 2014): stop once U − F_VFE < tol·N, `tol` nats per data point
(the gap, unlike the bounds themselves, does not depend on the units of y).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..diagnostics import ApproximationWarning
from ..diagnostics.inducing_gain import inducing_gain
from ..features.base import InducingLike
from ..kernels.base import Kernel
from ..models import SGPR
from ..validation import ArrayLike, as_inputs, check_columns, positive_float, positive_int


@dataclass
class SelectionCurve:
    """The bounds after every step: M, the VFE lower bound, the upper bound, and whether the
    hyperparameters had just been refitted (units of y)."""

    num_inducing: list[int] = field(default_factory=list)
    lower: list[float] = field(default_factory=list)
    upper: list[float] = field(default_factory=list)
    refitted: list[bool] = field(default_factory=list)

    def record(self, model: SGPR, refitted: bool) -> None:
        self.num_inducing.append(model.num_inducing)
        self.lower.append(model.log_marginal_likelihood())
        self.upper.append(model.upper_bound())
        self.refitted.append(refitted)

    @property
    def gap(self) -> np.ndarray:
        return np.asarray(self.upper) - np.asarray(self.lower)

    def __len__(self) -> int:
        return len(self.num_inducing)


def _converged(curve: SelectionCurve, allowed_gap: float) -> bool:
    return curve.upper[-1] - curve.lower[-1] < allowed_gap


def select_inducing(
    X: ArrayLike, y: ArrayLike, kernel: Kernel | None = None, *, tol: float = 0.01,
    max_inducing: int | None = None, candidates: ArrayLike | None = None,
    candidates_per_step: int | None = 500, initial_inducing: InducingLike = 1,
    optimize_inducing: bool = False, maxiter: int = 1000, seed: int = 0,
    **model_kwargs: Any,
) -> tuple[SGPR, SelectionCurve]:
    """A VFE `SGPR` whose M was grown greedily until its bounds meet, and the bound curve.

    Shapes: X [N, D], y [N], candidates [C, D] (default: the training inputs X).
    Schedule: start from `initial_inducing` — an int (that many inputs, k-means++, seeded) or
    any inducing feature (`sparsegp.features`, in the units of X), which then grows by
    inducing points (`feature.extended`) — at the initial
    hyperparameters (the kernel's values, or the data-based defaults of `SGPR`). Then
    alternate (a) greedy growth with the hyperparameters fixed — add the candidate with the
    largest VFE gain, at most `candidates_per_step` candidates drawn at random per step as in
    Titsias (2009) (None: all) — until upper − lower < tol·N (`tol` nats per data point; the
    diagnostics warn above 0.1) or M reaches
    `max_inducing` (default min(N, 1000)), and (b) a refit of the hyperparameters
    (`fit(maxiter)`, inducing inputs frozen unless `optimize_inducing`). Stop when the bounds
    still meet after a refit, at `max_inducing`, or when no candidate improves the bound.
    Hyperparameters are never fitted with too few inducing inputs: a VFE fit with very small
    M explains the data as noise, where the bounds meet trivially (Bauer et al. 2016).
    `model_kwargs` go to `SGPR` (noise_variance, jitter, standardize_X, standardize_y, ...).
    The Titsias (2014) upper bound stays loose by a term that grows with Σ_n d_n, so the
    default of 0.01 nats per point already means that the bounds have essentially met.
    Returns (model, curve): `curve.num_inducing`, `curve.lower`, `curve.upper` are lists with
    one entry per step, `curve.gap` [steps]. An `ApproximationWarning` says so when it stops
    with the bounds apart (max_inducing reached, candidates used up, or none improving);
    copies of an added candidate are not tried again.

    Example:

        >>> import sparsegp as sg
        >>> X, y = sg.datasets.snelson()
        >>> model, curve = sg.select_inducing(X, y, max_inducing=20, maxiter=5)
        >>> type(model).__name__, model.approximation, model.num_inducing <= 20
        ('SGPR', 'vfe', True)
        >>> len(curve.gap) == len(curve), curve.num_inducing[-1] == model.num_inducing
        (True, True)
    """
    tol = positive_float(tol, "tol")
    if "approximation" in model_kwargs or "inducing_points" in model_kwargs:
        raise TypeError("select_inducing always fits VFE and chooses the inducing points itself")
    model = SGPR(X, y, kernel=kernel, inducing_points=initial_inducing, approximation="vfe",
                 seed=seed, **model_kwargs)
    N = model.num_data
    allowed_gap = tol * N
    max_inducing = (min(N, 1000) if max_inducing is None
                    else positive_int(max_inducing, "max_inducing"))
    if not 1 <= model.num_inducing <= max_inducing:
        raise ValueError(f"need 1 ≤ initial_inducing ≤ max_inducing; got {model.num_inducing}, "
                         f"{max_inducing}")
    check_columns(candidates, model.feature_names, "candidates")  # by name, as for predict
    pool = as_inputs(X if candidates is None else candidates, "candidates",
                     num_features=model.input_dim, dtype=torch.float64).cpu().numpy()
    if candidates_per_step is not None:
        candidates_per_step = positive_int(candidates_per_step, "candidates_per_step")
    rng = np.random.default_rng(seed)
    available = np.ones(pool.shape[0], dtype=bool)
    curve = SelectionCurve()
    curve.record(model, False)
    while True:
        met = _converged(curve, allowed_gap)
        if met and curve.refitted[-1]:
            break
        exhausted = model.num_inducing >= max_inducing or not available.any()
        if met or exhausted:
            if not curve.refitted[-1]:
                if not optimize_inducing:
                    model.freeze(*(n for n in model.parameter_names() if n.startswith("feature.")))
                model.fit(maxiter=maxiter, progress=False, diagnose=False)
                curve.record(model, True)
                continue
            break
        idx = np.flatnonzero(available)
        if candidates_per_step is not None and idx.size > candidates_per_step:
            idx = rng.choice(idx, candidates_per_step, replace=False)
        gain = inducing_gain(model, pool[idx])
        best = gain.best
        available[idx[best]] = False
        available[idx[~(gain.total > 0.0)]] = False  # existing inducing inputs: nothing to gain
        if not gain.total[best] > 0.0:
            continue
        model.add_inducing_points(pool[idx[best]][None, :])
        available &= ~np.all(pool == pool[idx[best]], axis=1)  # its copies add nothing
        curve.record(model, False)
    if not _converged(curve, allowed_gap):
        why = ("max_inducing reached" if model.num_inducing >= max_inducing else
               "no candidate improves the bound" if available.any() else "candidates used up")
        warnings.warn(f"select_inducing stopped at M = {model.num_inducing} ({why}) with the "
                      f"bounds {curve.upper[-1] - curve.lower[-1]:.3g} nats apart, more than "
                      f"tol·N = {allowed_gap:.3g}: the "
                      "approximation is not certified; give more or other candidates, or a "
                      "larger max_inducing", ApproximationWarning, stacklevel=2)
    return model, curve
