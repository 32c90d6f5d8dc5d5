"""KISS-GP / structured kernel interpolation (Wilson & Nickisch 2015): GP regression with the
kernel interpolated from a regular grid, K ≈ W K_UU Wᵀ, trained by iterative methods."""

from __future__ import annotations

import math
import numbers
import warnings
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from ..diagnostics.estimates import KISSDiagnostics
from ..diagnostics.report import ApproximationWarning
from ..kernels.base import Kernel
from ..kernels.stationary import Matern12, RadialKernel, SquaredExponential
from ..means import MeanLike
from ..objectives.exact import exact_log_marginal_likelihood
from ..objectives.interpolated import Probes, Solution, evidence, solve_targets
from ..posteriors import InterpolatedPosterior
from ..runtime.config import PARAMETER_DTYPE
from ..runtime.threads import threads_for
from ..structured.grid import Grid, interpolate, kuu_matmul
from ..structured.interpolation import grid_bounds
from ..structured.lanczos import inverse_root, lanczos
from ..training import FitResult
from ..training.guard import guarded
from ..training.stochastic import fit_adam
from ..validation import ArrayLike, check_seed
from .core.data import Inputs, Placement
from .core.fitting import FitOptions, TrainingPlan, default
from .core.model import Parts, Targets, refuse_options
from .core.options import RegressionOptions
from .core.regression import Regression, RegressionSpec
from .core.spec import ModelSpec, NoiseSpec

#: KISS-GP stores G^D grid values: beyond three input dimensions the grid does not fit.
MAX_INPUT_DIM = 3
#: Data sets up to this size get the exact GP's evidence (same kernel) in `diagnostics()`.
EXACT_MAX_DATA = 2000
#: The largest grid spacing, in lengthscales, at which cubic interpolation keeps the kernel
#: close (measured on 300 points in 1-D, noise 0.01: at 0.45 lengthscales the evidence is
#: within 0.4 nats of the exact GP's (SE) and 3 nats (Matérn-5/2); at 1.2, 34 and 21 nats
#: below; at 2.9, 4500 below).
MAX_SPACING = 0.5


@dataclass(frozen=True, kw_only=True)
class KISSGPOptions(RegressionOptions):
    """`KISSGP`'s options: the grid, and the iterative methods' probes, preconditioner,
    tolerance and ranks (the kernel: a radial one, SE with ARD lengthscales by default)."""

    grid_size: Any
    num_probes: int
    preconditioner_rank: int
    cg_tolerance: float
    max_cg_iterations: int
    lanczos_rank: int
    seed: int

    def __post_init__(self) -> None:
        super().__post_init__()
        kernel = SquaredExponential(ard=True) if self.kernel is None else self.kernel
        if not isinstance(kernel, RadialKernel):
            raise TypeError(f"KISSGP needs a stationary radial kernel (SquaredExponential, "
                            f"Matern12/32/52); got {type(kernel).__name__}")
        self._set("kernel", kernel)
        for name in ("num_probes", "max_cg_iterations", "lanczos_rank", "preconditioner_rank"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < (
                    0 if name == "preconditioner_rank" else 1):
                raise ValueError(f"{name} must be a positive integer; got {value!r}")
            self._set(name, int(value))
        if not (0.0 < float(self.cg_tolerance) < 1.0):
            raise ValueError(f"cg_tolerance must lie in (0, 1); got {self.cg_tolerance!r}")
        self._set("cg_tolerance", float(self.cg_tolerance))
        self._set("seed", check_seed(self.seed))


@dataclass(frozen=True, kw_only=True)
class KISSGPSpec(RegressionSpec):
    """`KISSGP`'s spec: the grid (points per input dimension, where it starts, its spacing)
    and the iterative methods' probes, preconditioner, tolerance, ranks and seed."""

    grid_size: tuple[int, ...] = ()
    grid_start: tuple[float, ...] = ()
    grid_spacing: tuple[float, ...] = ()
    num_probes: int = 10
    preconditioner_rank: int = 50
    cg_tolerance: float = 1e-6
    max_cg_iterations: int = 1000
    lanczos_rank: int = 200
    seed: int = 0


class KISSGP(Regression[KISSGPOptions]):
    """GP regression with the structured-interpolation kernel W K_UU Wᵀ on a regular grid of
    `grid_size` points per input dimension (or one size per dimension), D ≤ 3.

    The kernel must be a stationary `SquaredExponential` or Matérn (for D > 1 KISS-GP uses
    the product over dimensions of their 1-D versions: exactly the ARD kernel for the squared
    exponential, a different kernel for Matérn). K_UU is a Kronecker product of Toeplitz
    matrices (FFT products); the evidence is computed with preconditioned conjugate gradients
    (`cg_tolerance`, pivoted-Cholesky preconditioner of rank `preconditioner_rank`) and
    stochastic Lanczos quadrature on `num_probes` probe vectors drawn from `seed` (the
    reported evidence is a deterministic estimate; `fit()` takes Adam steps with fresh probes
    per step, an unbiased gradient). Predictions: mean by CG, variances by at most
    `lanczos_rank` Lanczos steps (LOVE; exact once the Krylov space is exhausted, where the run
    stops early, conservative below). Inputs beyond the grid (the training inputs' range and
    10% of it on each side) are refused.
    By default y is standardised inside (`standardize_y=True`): predictions, `noise_variance`
    and the objectives are in the units of y, the kernel's variance is relative to var(y);
    `standardize_y=False` models y as given. X is taken as given (`standardize_X=True`
    standardises its columns, and the lengthscales are then in their standard deviations).
    Shapes: X [N, D], y [N]; `predict(Xnew [N*, D])` -> mean, var `[N*]` (numpy).

    Example:

        >>> import sparsegp as sg
        >>> X, y = sg.datasets.snelson()
        >>> m = sg.KISSGP(X, y, grid_size=64)
        >>> m.sizes
        [64]
        >>> mean, var = m.predict(X[:5])
        >>> mean.shape, var.shape
        ((5,), (5,))
    """

    spec: KISSGPSpec
    spec_type: ClassVar[type[ModelSpec]] = KISSGPSpec
    kernel: RadialKernel  # checked by the options
    grid_start: Tensor  # buffers [D]
    grid_spacing: Tensor

    def __init__(self, X: ArrayLike, y: ArrayLike, kernel: Kernel | None = None,
                 grid_size: Any = 100, noise_variance: ArrayLike | None = None, *,
                 num_probes: int = 10, preconditioner_rank: int = 50,
                 cg_tolerance: float = 1e-6, max_cg_iterations: int = 1000,
                 lanczos_rank: int = 200, seed: int = 0, mean: MeanLike = None,
                 standardize_X: bool = False, standardize_y: bool = True,
                 dtype: torch.dtype | None = None) -> None:
        self._build_from_data(X, y, KISSGPOptions(
            kernel=kernel, grid_size=grid_size, noise_variance=noise_variance,
            num_probes=num_probes, preconditioner_rank=preconditioner_rank,
            cg_tolerance=cg_tolerance, max_cg_iterations=max_cg_iterations,
            lanczos_rank=lanczos_rank, seed=seed, mean=mean, jitter=0.0, noise_groups=None,
            standardize_X=standardize_X, standardize_y=standardize_y, dtype=dtype))

    def _configure(self, inputs: Inputs, options: KISSGPOptions, placement: Placement
                   ) -> tuple[dict[str, object], Parts]:
        o = options
        D = inputs.X.shape[1]
        if D > MAX_INPUT_DIM:
            raise ValueError(f"KISS-GP needs a grid of G^D points: with D = {D} input dimensions "
                             f"that is too large (at most {MAX_INPUT_DIM}); use SGPR (inducing "
                             "points) or SVGP, or reduce the inputs' dimension first")
        grid_size = o.grid_size
        sizes = ([grid_size] * D if isinstance(grid_size, numbers.Integral) else
                 list(grid_size) if isinstance(grid_size, (list, tuple)) else [])
        if len(sizes) != D or any(isinstance(g, bool) or not isinstance(g, numbers.Integral)
                                  or g < 8 for g in sizes):
            raise ValueError(f"grid_size must be an integer ≥ 8 or {D} of them (one per input "
                             f"dimension); got {grid_size!r}")
        fields, parts = super()._configure(inputs, options, placement)
        start, spacing = grid_bounds(inputs.X, [int(g) for g in sizes])
        fields.update(grid_size=tuple(int(g) for g in sizes), num_probes=o.num_probes,
                      preconditioner_rank=o.preconditioner_rank, cg_tolerance=o.cg_tolerance,
                      max_cg_iterations=o.max_cg_iterations, lanczos_rank=o.lanczos_rank,
                      seed=o.seed, grid_start=tuple(start.tolist()),
                      grid_spacing=tuple(spacing.tolist()))
        return fields, parts

    def _initialise(self, options: KISSGPOptions) -> None:
        super()._initialise(options)
        self._warn_coarse_grid(stacklevel=5)

    def grid_problems(self) -> list[str]:
        """Input dimensions whose grid spacing exceeds `MAX_SPACING` lengthscales (at the
        kernel's current lengthscales), each with the grid size that would do."""
        with torch.no_grad():
            ell = self.kernel.value("lengthscale").expand(len(self.sizes))
            ratios = (self.grid_spacing / ell).tolist()
        problems = []
        for d, (r, G) in enumerate(zip(ratios, self.sizes)):
            if r > MAX_SPACING:
                needed = math.ceil((G - 1) * r / MAX_SPACING) + 1
                problems.append(f"the grid spacing in input {d} is {r:.2g} lengthscales (more "
                                f"than {MAX_SPACING}): the interpolated kernel is far from the "
                                f"kernel there; grid_size ≥ {needed} for this lengthscale")
        return problems

    def _warn_coarse_grid(self, stacklevel: int) -> None:
        problems = self.grid_problems()
        if problems:
            warnings.warn(f"KISSGP: {'; '.join(problems)}", ApproximationWarning,
                          stacklevel=stacklevel)

    def _prepare_targets(self, y: ArrayLike, inputs: Inputs, parts: Parts,
                         options: KISSGPOptions, placement: Placement) -> Targets:
        targets = super()._prepare_targets(y, inputs, parts, options, placement)
        noise = targets.fields["noise"]
        if isinstance(noise, NoiseSpec) and noise.count:  # the solves take one σ²
            raise ValueError("KISSGP takes one noise_variance (a number): a noise variance per "
                             "point or noise_groups are for SGPR and GPR")
        return targets

    def _declare(self, spec: ModelSpec, parts: Parts) -> None:
        super()._declare(spec, parts)
        assert isinstance(spec, KISSGPSpec)
        self.register_buffer("grid_start", torch.tensor(spec.grid_start, dtype=PARAMETER_DTYPE))
        self.register_buffer("grid_spacing", torch.tensor(spec.grid_spacing,
                                                          dtype=PARAMETER_DTYPE))
        self._grid: tuple[Tensor, Grid] | None = None
        self.last_solution: Solution | None = None

    @property
    def sizes(self) -> list[int]:
        """The grid's points per input dimension."""
        return list(self.spec.grid_size)

    def __getstate__(self) -> dict[str, Any]:
        """Copies and pickles leave out the grid cache: its sparse CSR matrices cannot be
        deep-copied (torch), and `grid()` rebuilds them on demand."""
        state = dict(super().__getstate__() if hasattr(super(), "__getstate__")
                     else self.__dict__)
        state["_grid"] = None
        return state

    # -- the iterative evidence -----------------------------------------------------------
    def grid(self) -> Grid:
        """The training inputs interpolated onto the grid (built once per data set)."""
        X, _ = self._data()
        if self._grid is None or self._grid[0] is not X:
            self._grid = (X, interpolate(X, self.grid_start, self.grid_spacing, self.sizes))
        return self._grid[1]

    def _probes(self, step: int | None = None) -> Probes:
        """The fixed probes of `seed` (step None), or fresh ones for a training step."""
        c = self.spec
        assert self.X is not None
        g = torch.Generator().manual_seed(c.seed if step is None
                                          else c.seed + 1_000_003 * (step + 1))
        eps1 = torch.randn(c.preconditioner_rank, c.num_probes, generator=g,
                           dtype=PARAMETER_DTYPE)
        eps2 = torch.randn(self.X.shape[0], c.num_probes, generator=g, dtype=PARAMETER_DTYPE)
        return Probes(eps1.to(self.device), eps2.to(self.device))

    def _solve(self, step: int | None = None) -> tuple[Tensor, Solution]:
        c = self.spec
        assert self.X is not None and self.y is not None
        value, sol = evidence(self.kernel, self.grid(), self.y - self.mean(self.X),
                              self.value("noise_variance"), self._probes(step),
                              c.preconditioner_rank, c.cg_tolerance, c.max_cg_iterations)
        self.last_solution = sol
        return value, sol

    def _objective(self) -> Tensor:
        return self._solve()[0]

    def training_loss(self, step: int | None = None) -> Tensor:
        """Minus (estimated evidence + log priors); `step` draws that step's own probes."""
        self._require_data()
        return -(self._solve(step)[0] + self._objective_offset() + self.log_prior())

    def evaluation_work(self) -> float:
        G = 1.0
        for g in self.sizes:
            G *= g
        iterations = 50.0
        return iterations * (self.spec.num_probes + 1) * (self.num_data * 4**len(self.sizes)
                                                          + 10 * G)

    #: the Lanczos run updates in place: gradients reach inputs only
    tracks_parameters: ClassVar[bool] = False

    def _build_posterior(self) -> InterpolatedPosterior:
        g = self.grid()
        c = self.spec
        assert self.X is not None and self.y is not None
        noise = self.value("noise_variance")
        alpha = solve_targets(self.kernel, g, self.y - self.mean(self.X), noise,
                              c.preconditioner_rank, c.cg_tolerance, c.max_cg_iterations)
        kuu = kuu_matmul(self.kernel, self.grid_spacing, self.sizes)
        a = kuu(g.Wt @ alpha[:, None])[:, 0]
        A = lambda V: g.W @ kuu(g.Wt @ V) + noise * V  # noqa: E731
        start = torch.randn(self.X.shape[0], generator=torch.Generator().manual_seed(
            c.seed + 1), dtype=PARAMETER_DTYPE).to(self.device)
        # stops early where the Krylov space is exhausted; T's eigenvalues checked in [σ², √3‖A‖]
        run = lanczos(A, start, c.lanczos_rank)
        C = kuu(g.Wt @ run.Q) @ inverse_root(run, noise)  # C Cᵀ = K_UU Wᵀ Q T⁻¹ Qᵀ W K_UU
        return InterpolatedPosterior(self.kernel, self.grid_start, self.grid_spacing,
                                     self.sizes, a, C, noise, self.prior_mean())

    def _restore_posterior(self, saved: dict[str, Any]) -> InterpolatedPosterior:
        return InterpolatedPosterior(self.kernel, self.grid_start, self.grid_spacing,
                                     self.sizes, saved["a"], saved["C"],
                                     saved["noise_variance"], self.prior_mean())

    #: Adam's step size where L-BFGS-B takes a tolerance
    fit_options: ClassVar[frozenset[str]] = frozenset({"maxiter", "lr", "progress", "callback",
                                                       "diagnose"})

    def training_plan(self, options: FitOptions) -> TrainingPlan:
        """`maxiter` (300) Adam steps (`lr`, 0.05) on the evidence with fresh probe vectors
        per step, whose gradient is an unbiased estimate (Gardner et al. 2018): the trace
        term's estimate has a variance that quasi-Newton line searches do not tolerate.
        `diagnose` is accepted for the common interface; `diagnostics()` reports on demand.
        Ctrl-C (or SIGTERM) at any moment, the grid check after the steps included, stops at
        the last completed step."""
        return TrainingPlan("Adam on the evidence", self.fit_options,
                            guarded(self, self._fit_adam))

    def _fit_adam(self, options: FitOptions) -> FitResult:
        with threads_for(self.evaluation_work()):
            result = fit_adam(self, default(options.maxiter, 300), default(options.lr, 0.05),
                              options.progress, options.callback)
        if not result.interrupted:  # the fitted lengthscales may be too short for the grid
            self._warn_coarse_grid(stacklevel=6)  # the caller of fit()
        return result

    def diagnostics(self, **refused: object) -> KISSDiagnostics:
        """The estimated evidence, CG's iterations and residual, and (N ≤ 2000) the exact GP's
        evidence with the same kernel. It takes no thresholds (any keyword is refused, naming
        it)."""
        refuse_options(self, refused)
        X, y = self._data()
        offset = self._objective_offset()
        with torch.no_grad():
            value, sol = self._solve()
            exact = None
            if self.num_data <= EXACT_MAX_DATA:
                exact = float(exact_log_marginal_likelihood(
                    self.kernel.K(X), y - self.mean(X),
                    self.value("noise_variance"))) + offset
        rep = KISSDiagnostics(float(value) + offset, exact, sol.cg.iterations, sol.cg.residual,
                              float(self.noise_variance))
        rep.warnings += self.grid_problems()
        # the estimate's own error: within a few nats up to N = 2000 at the default probes
        if exact is not None and abs(rep.objective - exact) > 2.0 + 0.01 * self.num_data:
            kink = ("; Matérn-1/2's kink at zero is resolved slowly by cubic interpolation, "
                    "another kernel may suit KISS-GP better" if isinstance(self.kernel, Matern12)
                    else "")
            rep.warnings.append(f"the estimated evidence is {rep.objective - exact:+.3g} nats "
                                "from the exact GP's at the same kernel, beyond the estimate's "
                                "noise: the interpolated kernel differs from the kernel (use a "
                                f"finer grid{kink})")
        return rep
