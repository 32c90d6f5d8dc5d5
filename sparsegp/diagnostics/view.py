"""What the diagnostics read of a model: a plain value the model hands over, never its
internals (diagnostics do not import models)."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from ..kernels.base import Kernel
from ..objectives.collapsed.members import CollapsedProblem
from ..objectives.online.regression import Summary
from ..validation import ArrayLike, as_inputs, check_columns


@dataclass(frozen=True)
class RegressionView:
    """A Gaussian-likelihood regression model as the diagnostics see it (internal units).

    `problem` is the collapsed objective of a sparse model (None for the exact GP); `offset`
    turns internal objectives into the units of y; `noise_variance` is σ² in the units of y;
    `x_shift`, `x_scale` map inputs to internal units, x' = (x − shift)/scale.
    `objective` is the model's own objective (internal units) when it is not the problem's —
    an SVGP's ELBO at its q(u), at most the collapsed bound — named by `approximation`;
    `objective_remedy` says what closes its gap to the bound. `summary` (a streamed model):
    the data before the new batch X, y as pseudo-observations (`objectives.online.Summary`);
    the bounds are then those of the evidence of both (`diagnostics.streamed`).
    """

    name: str
    kernel: Kernel
    X: Tensor
    y: Tensor
    noise: Tensor
    jitter: float
    offset: float
    noise_variance: float
    x_shift: Tensor
    x_scale: Tensor
    problem: CollapsedProblem | None = None
    sharded: bool = False
    feature_names: list[str] | None = None  # a DataFrame's columns, which candidates must match
    objective: float | None = None
    approximation: str | None = None
    objective_remedy: str = ""
    total_rows: int | None = None  # sharded: the rows of all ranks (X holds this rank's)
    summary: Summary | None = None

    @property
    def approximation_name(self) -> str:
        """What the model's objective is: "exact", the family member, or `approximation`."""
        if self.approximation is not None:
            return self.approximation
        return "exact" if self.problem is None else approximation_label(self.problem)

    @property
    def num_data(self) -> int:
        return self.X.shape[0] if self.total_rows is None else self.total_rows

    @property
    def label(self) -> str:
        if self.problem is None:
            return self.name
        return f"{self.name} ({self.approximation_name}, M = {self.problem.feature.num_inducing})"

    def internal(self, points: ArrayLike) -> Tensor:
        """Inputs [K, D] in the units of X, as internal-unit tensors (a DataFrame's columns must
        be the model's `feature_names`)."""
        check_columns(points, self.feature_names, "candidates")
        Z = as_inputs(points, "candidates", num_features=self.X.shape[1], device=self.X.device)
        return (Z.to(self.X.dtype) - self.x_shift) / self.x_scale

    def user(self, Z: Tensor) -> Tensor:
        return Z * self.x_scale + self.x_shift


def approximation_label(problem: CollapsedProblem) -> str:
    fam, blocks = problem.fam, problem.blocks
    if blocks is not None:
        member = "PITC" if fam.name == "fitc" else (
            f"block PEP (α = {fam.alpha:g})" if fam.alpha is not None else "block PEP (α per block)")
        return f"{member}, {blocks.num_blocks} blocks"
    return fam.name.upper() if fam.name != "pep" else f"PEP (α = {fam.alpha:g})"


def view_of(model: object) -> RegressionView:
    """The model's `diagnostic_view()` (GPR, SGPR, SVGP), or a clear error."""
    get = getattr(model, "diagnostic_view", None)
    if get is None:
        raise TypeError("the diagnostics apply to Gaussian-likelihood regression models (GPR, "
                        f"SGPR, SVGP); got {type(model).__name__}")
    return get()
