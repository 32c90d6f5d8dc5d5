"""Reports on the models whose objective bounds nothing: KISS-GP's estimated evidence of its
interpolated kernel and the random-feature models' parametric evidence, each beside the exact
GP's at the same kernel where N is small enough to compute it."""

from __future__ import annotations

from dataclasses import dataclass, field

from .report import Checked


@dataclass
class SpectralDiagnostics(Checked):
    """What can be said of a feature-map model's fit: its evidence, the exact GP's at the same
    hyperparameters where N is small enough, and warnings (always: it is not a bound)."""

    model: str
    num_data: int
    num_features: int
    objective: float
    exact: float | None
    noise_variance: float
    warnings: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"Diagnostics of {self.model} (R = {self.num_features} spectral pairs) on "
                 f"N = {self.num_data} points",
                 f"  objective (parametric evidence)  {self.objective:.4f}"]
        if self.exact is not None:
            lines.append(f"  exact GP log p(y), same kernel   {self.exact:.4f}  "
                         f"(difference {self.objective - self.exact:+.4f})")
        lines.append(f"  noise variance                   {self.noise_variance:.4g}")
        lines += ["warnings:"] + [f"  - {w}" for w in self.warnings]
        return "\n".join(lines)


@dataclass
class KISSDiagnostics(Checked):
    """What can be said of a KISS-GP fit: the estimated evidence of the interpolated model,
    the exact GP's with the same kernel where N is small, and how CG converged."""

    objective: float
    exact: float | None
    cg_iterations: int
    cg_residual: float
    noise_variance: float
    warnings: list[str] = field(default_factory=lambda: [
        "the objective is a stochastic estimate (fixed probes) of the evidence of the "
        "interpolated kernel W K_UU Wᵀ, not a bound on the exact GP's"])

    def __str__(self) -> str:
        lines = ["Diagnostics of KISSGP",
                 f"  objective (estimated evidence)  {self.objective:.4f}"]
        if self.exact is not None:
            lines.append(f"  exact GP log p(y), same kernel  {self.exact:.4f}  (difference "
                         f"{self.objective - self.exact:+.4f})")
        lines += [f"  CG iterations {self.cg_iterations}, relative residual "
                  f"{self.cg_residual:.2e}", f"  noise variance {self.noise_variance:.4g}",
                  "warnings:", *[f"  - {w}" for w in self.warnings]]
        return "\n".join(lines)
