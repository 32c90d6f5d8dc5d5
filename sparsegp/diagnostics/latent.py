"""What can be said of a sparse model with a non-Gaussian likelihood (SGPC, SVGP).

No upper bound on log p(y) is available in closed form beyond the Gaussian likelihood, so
there is no sandwich: the report gives the objective for what it is (the Power-EP energy, an
approximation to log p(y); the ELBO, a lower bound on it) and checks where the inducing
variables sit, as `diagnose` does for regression (merged pairs, far from every data point).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import torch
from torch import Tensor

from .. import covariances as cov
from ..features.base import InducingFeature
from ..kernels.base import Kernel
from ..validation import positive_float
from .placement import inducing_placement, placement_warnings
from .report import Checked


class LatentView(NamedTuple):
    """What a non-Gaussian sparse model hands to `diagnose_latent`: its name and
    approximation, the objective and what it is, the inducing feature, kernel and inputs X
    [N, D] (internal units), and why this approximation would merge inducing variables.
    A streamed model's X also holds the old inducing inputs (where its old data are
    represented): `num_data` then counts the new batch, and `no_upper_bound` says why the
    report has no upper bound (default: the likelihood)."""

    name: str
    approximation: str
    objective: float
    objective_name: str
    feature: InducingFeature
    kernel: Kernel
    X: Tensor
    merge_cause: str
    num_data: int | None = None
    no_upper_bound: str = "for this likelihood"


@dataclass
class LatentDiagnostics(Checked):
    """What `diagnose_latent` found: the objective (units of log p(y)) and the inducing
    variables' placement; `merged_pairs` and `far_inducing` index the M inducing variables
    (all outputs' in order, for one feature per output). `str(rep)` is a table."""

    model: str
    approximation: str
    num_data: int
    objective: float
    objective_name: str
    num_inducing: int
    effective_num_inducing: int
    merged_pairs: list[tuple[int, int]] = field(default_factory=list)
    far_inducing: list[int] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    no_upper_bound: str = "for this likelihood"

    def __str__(self) -> str:
        rows = [(f"objective ({self.objective_name})", f"{self.objective:.4f}"),
                ("inducing variables M", f"{self.num_inducing}, effectively "
                 f"{self.effective_num_inducing} ({len(self.merged_pairs)} merged pairs)"),
                ("inducing variables far from data", str(len(self.far_inducing)))]
        width = max(len(r[0]) for r in rows)
        lines = [f"Diagnostics of {self.model} ({self.approximation}, M = {self.num_inducing}) "
                 f"on N = {self.num_data} points"]
        lines += [f"  {name.ljust(width)}  {value}" for name, value in rows]
        lines.append(f"  (no upper bound on log p(y) {self.no_upper_bound}: no sandwich)")
        lines += ["warnings:", *[f"  - {w}" for w in self.warnings]] if self.warnings else [
            "no warnings"]
        return "\n".join(lines)


def diagnose_latent(view: LatentView, *, merge_fraction: float = 0.05,
                    far_lengthscales: float = 3.0) -> LatentDiagnostics:
    """The report of a non-Gaussian sparse model: the objective and the inducing checks of
    `diagnose` (thresholds as there). One feature per output (`kernels.Separate`): each
    output's inducing variables are checked among themselves."""
    positive_float(merge_fraction, "merge_fraction")
    positive_float(far_lengthscales, "far_lengthscales")
    pairs = cov.separate_pairs(view.feature, view.kernel) or [(view.feature, view.kernel)]
    merged: list[tuple[int, int]] = []
    far: list[int] = []
    effective, offset, warnings = 0, 0, []
    with torch.no_grad():
        for j, (feature, kernel) in enumerate(pairs):
            place = inducing_placement(feature, kernel, view.X, merge_fraction,
                                       far_lengthscales)
            M = feature.num_inducing
            merged += [(a + offset, b + offset) for a, b in place.merged_pairs]
            far += [i + offset for i in place.far]
            effective += place.effective
            prefix = f"output {j}: " if len(pairs) > 1 else ""
            warnings += [prefix + w for w in placement_warnings(
                place, M, merge_fraction, far_lengthscales, view.merge_cause)]
            offset += M
    num_data = view.X.shape[0] if view.num_data is None else view.num_data
    return LatentDiagnostics(view.name, view.approximation, num_data, view.objective,
                             view.objective_name, offset, effective, merged, far, warnings,
                             view.no_upper_bound)
