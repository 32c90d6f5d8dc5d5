"""Random Fourier features (RFF; Rahimi & Recht 2008) and the sparse spectrum GP (SSGP;
Lázaro-Gredilla et al. 2010): Bayesian linear regression on R spectral pairs (docs/math.md §6).

Both use φ(x) = √(σ²/R)[cos(ω_rᵀx), sin(ω_rᵀx)] (`kernels.spectral.feature_map`). RFF draws
ε_r once from the kernel's spectral density at unit lengthscale (seeded) and uses ω_r = ε_r/ℓ,
so the kernel's lengthscales, variance and the noise stay differentiable hyperparameters of
the evidence; SSGP makes the frequencies ω_r themselves free parameters (started at the RFF
draw), which fits more and, as R grows towards N, over-fits (Lázaro-Gredilla et al. 2010).
The evidence, O(N·R²), is that of the parametric model, not a bound on the GP's.
"""

from __future__ import annotations

import numbers
import warnings
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import torch
from torch import Tensor

from ..diagnostics import ApproximationWarning
from ..diagnostics.convergence import material_nats
from ..diagnostics.estimates import SpectralDiagnostics
from ..distributed import gathered_rows, global_sum
from ..kernels.base import Kernel
from ..kernels.spectral import feature_map, spectral_samples
from ..means import MeanLike
from ..objectives.collapsed.members import family_objective, q_from_statistics, residual, solve
from ..objectives.exact import exact_log_marginal_likelihood
from ..objectives.parametric import feature_statistics
from ..parameters import Parameterised
from ..posteriors import FeaturePosterior
from ..runtime.chunking import auto_chunk_size, check_chunk_size
from ..runtime.config import PARAMETER_DTYPE
from ..training import FitResult
from ..training.guard import guarded
from ..validation import ArrayLike, check_seed, seeded_generator
from .core.data import Inputs, Placement
from .core.fitting import FitOptions, TrainingPlan
from .core.model import Parts, refuse_options
from .core.options import RegressionOptions
from .core.regression import Regression, RegressionSpec
from .core.spec import ModelSpec

#: Data sets up to this size get the exact GP's evidence in `diagnostics()` for comparison.
EXACT_MAX_DATA = 2000


class SpectralBasis(Parameterised):
    """R spectral pairs: ω = ε/ℓ from fixed draws ε (RFF), or free frequencies ω (SSGP)."""

    frequencies: Tensor  # a parameter when free
    epsilon: Tensor  # a buffer otherwise

    def __init__(self, epsilon: Tensor, free: bool) -> None:
        super().__init__()
        self.free = bool(free)
        if self.free:  # a Parameterised, so that `freeze`, priors and `summary` reach it
            self._add_free("frequencies", epsilon.clone())
        else:
            self.register_buffer("epsilon", epsilon.clone())

    @property
    def num_inducing(self) -> int:
        """K = 2R basis functions."""
        return 2 * (self.frequencies if self.free else self.epsilon).shape[0]

    def omega(self, kernel: Kernel) -> Tensor:
        """The frequencies ω [R, D]."""
        if self.free:
            return self.frequencies
        return self.epsilon / kernel.value("lengthscale")

    def features(self, X: Tensor, kernel: Kernel) -> Tensor:
        """φ(X) [2R, N]."""
        return feature_map(X, self.omega(kernel).to(X.dtype), kernel.value("variance"))


@dataclass(frozen=True, kw_only=True)
class RFFOptions(RegressionOptions):
    """`RFF`'s and `SSGP`'s options: R spectral pairs, the seed of their draw, the rows per
    chunk."""

    num_features: int
    seed: int
    chunk_size: int | None

    def __post_init__(self) -> None:
        super().__post_init__()
        R = self.num_features
        if isinstance(R, bool) or not isinstance(R, numbers.Integral) or R < 1:
            raise ValueError(f"num_features must be a positive integer (R spectral pairs); got "
                             f"{R!r}")
        self._set("num_features", int(R))
        self._set("seed", check_seed(self.seed))
        self._set("chunk_size", check_chunk_size(self.chunk_size))


@dataclass(frozen=True, kw_only=True)
class RFFSpec(RegressionSpec):
    """`RFF`'s and `SSGP`'s spec: R spectral pairs, the seed of their draw, the rows per
    chunk."""

    num_features: int = 100
    seed: int = 0
    chunk_size: int | None = None


class RFF(Regression[RFFOptions]):
    """Random Fourier features: `num_features` R spectral pairs drawn from the kernel's spectral
    density (SE, Matérn 1/2, 3/2, 5/2) with `seed`, fixed; the kernel's hyperparameters and the
    noise are fitted on the evidence of Bayesian linear regression in the 2R features.
    By default y is standardised inside (`standardize_y=True`): predictions, `noise_variance`
    and the objectives are in the units of y, the kernel's variance is relative to var(y);
    `standardize_y=False` models y as given. X is taken as given (`standardize_X=True`
    standardises its columns, and the lengthscales are then in their standard deviations).
    Shapes: X [N, D], y [N]. Predictions have the model's own (parametric) error bars.
    `predict(Xnew [N*, D])` -> mean, var `[N*]`; `frequencies` ω [R, D].

    Example:

        >>> import sparsegp as sg
        >>> X, y = sg.datasets.snelson()
        >>> m = sg.RFF(X, y, num_features=20, seed=0)
        >>> result = m.fit(maxiter=5, diagnose=False)
        >>> m.num_features, m.frequencies.shape
        (20, (20, 1))
        >>> mean, var = m.predict_y(sg.datasets.snelson_test_inputs())
        >>> mean.shape, bool((var > 0).all())
        ((301,), True)
    """

    spec: RFFSpec
    spec_type: ClassVar[type[ModelSpec]] = RFFSpec
    free_frequencies: ClassVar[bool] = False
    shards_data: ClassVar[bool] = True  # under torch.distributed, X and y are this rank's shard

    def __init__(self, X: ArrayLike, y: ArrayLike, kernel: Kernel | None = None,
                 num_features: int = 100, noise_variance: ArrayLike | None = None,
                 seed: int = 0, *, mean: MeanLike = None, chunk_size: int | None = None,
                 standardize_X: bool = False, standardize_y: bool = True,
                 dtype: torch.dtype | None = None) -> None:
        self._build_from_data(X, y, RFFOptions(
            kernel=kernel, num_features=num_features, noise_variance=noise_variance,
            noise_groups=None, seed=seed, mean=mean, jitter=0.0, chunk_size=chunk_size,
            standardize_X=standardize_X, standardize_y=standardize_y, dtype=dtype))

    def _configure(self, inputs: Inputs, options: RFFOptions, placement: Placement
                   ) -> tuple[dict[str, object], Parts]:
        o = options
        fields, parts = super()._configure(inputs, options, placement)
        epsilon = spectral_samples(parts["kernel"], o.num_features,
                                   inputs.X.shape[1], seeded_generator(o.seed))
        fields.update(num_features=o.num_features, seed=o.seed, chunk_size=o.chunk_size)
        parts["basis"] = SpectralBasis(epsilon.to(PARAMETER_DTYPE), self.free_frequencies)
        return fields, parts

    def _declare(self, spec: ModelSpec, parts: Parts) -> None:
        super()._declare(spec, parts)
        assert isinstance(spec, RFFSpec)
        basis = parts.get("basis")
        if basis is None:  # load: the values come from the state dict
            basis = SpectralBasis(torch.zeros(spec.num_features, spec.input_dim,
                                              dtype=PARAMETER_DTYPE), self.free_frequencies)
        self.basis = cast(SpectralBasis, basis)

    def _initialise(self, options: RFFOptions) -> None:
        super()._initialise(options)
        if self.free_frequencies:  # SSGP starts from the RFF draw at the initial lengthscales
            with torch.no_grad():
                self.basis.frequencies.div_(self.kernel.value("lengthscale"))
            self.freeze("kernel.lengthscale")  # φ no longer depends on it

    @property
    def chunk_size(self) -> int | None:
        """The rows of data processed at a time (None: from a memory budget)."""
        return self.spec.chunk_size

    @property
    def num_features(self) -> int:
        """R, the number of spectral pairs (2R basis functions)."""
        return self.basis.num_inducing // 2

    @property
    def frequencies(self) -> Any:
        """The frequencies ω [R, D] in internal units (after `standardize_X`)."""
        return self.basis.omega(self.kernel).detach().cpu().numpy()

    def evaluation_work(self) -> float:
        K = float(self.basis.num_inducing)
        return float(self.num_data) * K * K + K**3

    def _statistics(self):
        size = self.chunk_size or auto_chunk_size(self.basis.num_inducing, 8, device=self.device)
        assert self.X is not None and self.y is not None
        sharded = self.placement.sharded
        y = residual(self.X, self.y, self.prior_mean(), sharded)
        return feature_statistics(self.basis, self.kernel, self.X, y, self.noise_rows(), size,
                                  sharded)

    def _objective(self) -> Tensor:
        stats = self._statistics()
        return family_objective(stats, solve(stats))

    def _build_posterior(self) -> FeaturePosterior:
        q = q_from_statistics(self._statistics())
        return FeaturePosterior(self.basis, self.kernel, q, self.noise_rows(), self.prior_mean())

    def _restore_posterior(self, saved: dict[str, Any]) -> FeaturePosterior:
        return FeaturePosterior.from_state(self.basis, self.kernel, saved, self.prior_mean())

    def training_plan(self, options: FitOptions) -> TrainingPlan:
        """L-BFGS-B on the evidence (kernel hyperparameters, noise; SSGP: the frequencies
        too), then, unless `diagnose=False`, the checks of the fitted model (`_check_fit`):
        see `Model.training_plan`. Ctrl-C (or SIGTERM) at any moment stops at the last
        accepted iterate; in the checks, it skips them (the result says interrupted)."""
        plan = super().training_plan(options)
        return plan._replace(run=guarded(self, plan.run))

    def _check_fit(self, stacklevel: int, result: FitResult) -> None:
        """After `fit()`, unless `diagnose=False`: a warning if `diagnostics()` finds
        something."""
        rep = self.diagnostics()
        serious = [w for w in rep.warnings if not w.startswith(_NOT_A_BOUND[:20])]
        if serious:
            # `stacklevel` counts from a function called here (− 1), and the guard of
            # `training_plan` runs the plan one frame below fit() (+ 1)
            warnings.warn(f"{type(self).__name__}: {'; '.join(serious)}",
                          ApproximationWarning, stacklevel=stacklevel)

    def diagnostics(self, **refused: object) -> SpectralDiagnostics:
        """The evidence, the exact GP's at the same hyperparameters (RFF, N ≤ 2000), and
        warnings: this evidence is not a bound on the GP's; more basis functions than data.
        With data sharded over torch.distributed ranks, of all ranks' rows (every rank calls
        it). It takes no thresholds (any keyword is refused, naming it)."""
        refuse_options(self, refused)
        self._require_data()
        assert self.X is not None and self.y is not None
        offset = self._objective_offset()
        with torch.no_grad():
            objective = float(self._objective()) + offset
            noise_rows = self.noise_rows().detach()
            X, residual = self.X, self.y - self.mean(self.X)
            sharded = self.placement.sharded
            if sharded and noise_rows.dim() == 1:
                noise_mean = global_sum(float(noise_rows.sum()), X) / self.num_data
            else:
                noise_mean = float(noise_rows.mean())
            exact = None  # SSGP's frequencies no longer belong to the kernel: no comparison
            if self.num_data <= EXACT_MAX_DATA and not self.free_frequencies:
                if sharded:
                    X, residual, noise_rows = gathered_rows(X, residual, noise_rows,
                                                            "the exact GP's rows")
                exact = float(exact_log_marginal_likelihood(
                    self.kernel.K(X), residual, noise_rows)) + offset
        noise = noise_mean * float(self.y_scale) ** 2
        rep = SpectralDiagnostics(type(self).__name__, self.num_data, self.num_features,
                                  objective, exact, noise, [_NOT_A_BOUND])
        if exact is not None and objective > exact + material_nats(self.num_data):
            rep.warnings.append(
                f"the evidence {objective:.4g} exceeds the exact GP's {exact:.4g} at the same "
                f"kernel by {objective - exact:.3g} nats: the random features fit this data "
                "better than the GP they approximate; check predictions on held-out data")
        if 2 * self.num_features >= self.num_data:
            rep.warnings.append(f"2R = {2 * self.num_features} basis functions for N = "
                                f"{self.num_data} points: the model can interpolate the data")
        return rep


class SSGP(RFF):
    """The sparse spectrum GP: `RFF` with the frequencies ω_r free parameters of the evidence
    (started at the seeded draw at the initial lengthscales; the kernel's lengthscales then no
    longer enter φ). Prone to over-fitting as R grows relative to N: compare held-out
    predictions, or several seeds (diverging predictions across restarts are the symptom).
    Shapes: X [N, D], y [N]; `frequencies` ω [R, D] (trainable); `predict(Xnew [N*, D])` ->
    mean, var `[N*]`.

    Example:

        >>> import sparsegp as sg
        >>> X, y = sg.datasets.snelson()
        >>> m = sg.SSGP(X, y, num_features=10, seed=0)
        >>> m.kernel.raw_lengthscale.requires_grad  # frozen: the frequencies replace it
        False
        >>> result = m.fit(maxiter=5, diagnose=False)
        >>> m.frequencies.shape, m.predict(X[:4])[0].shape
        ((10, 1), (4,))
    """

    free_frequencies: ClassVar[bool] = True


_NOT_A_BOUND = ("the objective is the evidence of a parametric model (Bayesian linear "
                "regression on random Fourier features), not a bound on the GP's log p(y)")
