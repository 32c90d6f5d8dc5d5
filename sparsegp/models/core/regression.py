"""The base of the Gaussian-likelihood regression models (GPR, SGPR, KISS-GP, RFF and SSGP):
the noise variance, the units of y, the L-BFGS-B plan with its checks after fitting, and what
predictions of y read.

With `standardize_y` (the default) the model works on (y − mean)/std (`units.Units`);
predictions, the noise variance and the objectives are reported in the units of y, while the
kernel's (and a prior mean's) parameters live in those internal units. The noise is one σ²,
one per group of points (`noise_groups`) or one known value per point (frozen): the
parameter `noise_variance` [] / [G] / [N] and the code of every point in `noise_codes`
(`noise.py`); predictions of y observe the latent f* through the noise of the new points.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import numpy as np
import torch
from torch import Tensor

from ...diagnostics import RegressionView, quadratic_rows_after_fit, warn_if_unhealthy
from ...diagnostics.starts import data_based_values
from ...distributed import POOLED_ROWS, summed_gradient
from ...means import MeanLike, Zero, as_mean
from ...objectives.collapsed.members import CollapsedProblem
from ...objectives.exact import exact_objective
from ...parameters import as_user_value
from ...posteriors import ExactPosterior, exact_posterior
from ...runtime.config import NOISE_FLOOR, PARAMETER_DTYPE
from ...runtime.threads import threads_for
from ...training import FitResult, fit_lbfgsb
from ...training.lbfgs import MAXITER
from ...training.result import Snapshot
from ...validation import ArrayLike, as_output_targets, as_targets, target_scale_problems
from .data import Inputs, Placement, observed_targets, pooled_data
from .fitting import (
    FitOptions,
    TrainingPlan,
    default,
    probe_rows,
    restart_if_stuck,
    settle_rule,
    stall_rule,
)
from .model import Model, Parts, Targets
from .noise import Noise, internal_noise, new_points_noise, noise_structure
from .options import RegressionOptions
from .predictions import Result
from .spec import ModelSpec, NoiseSpec
from .units import target_units

#: The options type of a regression model (`options.RegressionOptions` or a subclass).
R = TypeVar("R", bound=RegressionOptions)

#: A noise variance that is not given starts at this fraction of the signal variance.
NOISE_FRACTION = 0.1


def signal_variance(y: Tensor) -> float:
    """var(y), or 1 for constant targets (a starting value for kernel and noise variances)."""
    v = float(y.var()) if y.shape[0] > 1 else 0.0
    return v if v > 0.0 else 1.0


@dataclass(frozen=True, kw_only=True)
class RegressionSpec(ModelSpec):
    """A regression model's spec: the noise's structure, the output columns of y (None for
    y [N]) and, for a model conditioned on F fantasies, F."""

    noise: NoiseSpec = NoiseSpec()
    num_outputs: int | None = None
    fantasies: int | None = None


class Regression(Model[R]):
    """A GP regression model with Gaussian noise; see the module docstring, `GPR` and
    `SGPR`."""

    spec: RegressionSpec
    spec_type: ClassVar[type[ModelSpec]] = RegressionSpec
    #: y may have P output columns (independent outputs sharing kernel, inducing variables and
    #: noise; NaN marks a missing output): SGPR says yes
    multi_output: ClassVar[bool] = False
    #: True: takes kernels.Separate, one kernel per output (SGPR)
    separate_kernels: ClassVar[bool] = False
    #: the default L-BFGS-B fit also stops once the predictions have settled
    #: (`fitting.settle_rule`; `_prediction_probe`): GPR and SGPR say yes
    probes_predictions: ClassVar[bool] = False
    #: a default fit stuck at its start restarts from data-based starting values
    #: (`fitting.restart_if_stuck`)
    restarts_if_stuck: ClassVar[bool] = True
    #: L-BFGS-B (`training_plan`), then the checks after fitting unless `diagnose=False`
    fit_options: ClassVar[frozenset[str]] = Model.fit_options | {"diagnose"}

    y_shift: Tensor  # buffers: y is stored as (y − y_shift)/y_scale
    y_scale: Tensor
    noise_codes: Tensor | None  # buffer [N]: the noise variance of every point, or None

    # -- construction ---------------------------------------------------------------------
    def _declare(self, spec: ModelSpec, parts: Parts) -> None:
        assert isinstance(spec, RegressionSpec)
        self.kernel = parts["kernel"].to(dtype=PARAMETER_DTYPE)
        # the prior mean m(x) (models saved before means existed have none: zero)
        self.mean = parts.get("mean", Zero()).to(dtype=PARAMETER_DTYPE)
        self._declare_units(spec.input_dim, spec.num_outputs)
        # σ² (one), or one per group of points (`noise_groups`), or one per point (known,
        # heteroscedastic: frozen); `noise_codes` [N] maps points to them
        count = spec.noise.count
        self._add_positive("noise_variance", torch.ones(count) if count else 1.0, NOISE_FLOOR)
        self.register_buffer("noise_codes", None, persistent=False)
        if spec.noise.points is not None:
            self.freeze("noise_variance")

    def _prepare_targets(self, y: ArrayLike, inputs: Inputs, parts: Parts,
                         options: R, placement: Placement) -> Targets:
        """y in the model's units: checked, standardised (moments of all shards) and their
        noise structure (codes of groups or points)."""
        n = inputs.X.shape[0]
        device = inputs.device
        if self.multi_output:
            t = as_output_targets(y, n, "y", device=device).to(PARAMETER_DTYPE)
        else:
            t = as_targets(y, n, "y", device=device).to(PARAMETER_DTYPE)
        noise, codes = noise_structure(options.noise_variance, options.noise_groups, n)
        if t.dim() == 2:
            check_several_outputs(t, noise, options.mean, placement)
        units = target_units(t, options.standardize_y, placement)
        extras = {} if codes is None else {"noise_codes": codes}
        fields: dict[str, object] = {"noise": noise}
        if t.dim() == 2:
            fields["num_outputs"] = t.shape[1]
        return Targets((t - units["y_shift"]) / units["y_scale"], units, extras, fields,
                       self._target_scale_problems(t, options))

    def _target_scale_problems(self, y: Tensor, options: R) -> list[str]:
        # a prior mean other than zero takes the offset (None and Zero() leave it to the GP)
        zero_mean = isinstance(as_mean(options.mean), Zero)
        if options.standardize_y:
            return []
        if y.dim() == 1:
            return target_scale_problems(y, zero_mean)
        return [f"output {p}: {problem}" for p in range(y.shape[1])
                for problem in target_scale_problems(y[~torch.isnan(y[:, p]), p], zero_mean)]

    def _initialise(self, options: R) -> None:
        assert self.X is not None and self.y is not None
        self.mean.initialise_from_data(self.X, self.y)
        sv = self._target_signal_variance()
        if self.y.dim() == 1:  # one output: its residuals (a spectral mixture's periodogram)
            self.kernel.initialise_from_targets(self.X, self._residual().detach(), sv)
        else:
            self.kernel.initialise_from_data(self.X, sv)
        shape = self.value("noise_variance").shape
        value = (torch.full(shape, NOISE_FRACTION * sv, dtype=PARAMETER_DTYPE)
                 if options.noise_variance is None
                 else self._internal_noise(options.noise_variance))
        self.set_value("noise_variance", torch.as_tensor(value, dtype=PARAMETER_DTYPE)
                       .expand(shape).clone())

    # -- the exact GP of the data (GPR; an SGPR in its exact limit) ---------------------------
    def _residual(self) -> Tensor:
        """y − m(X), internal units, differentiable in the mean's parameters."""
        assert self.X is not None and self.y is not None
        return self.y - self.mean(self.X)

    def _exact_objective(self, jitter: float) -> Tensor:
        """log N(y − m(X) | 0, K + σ²I) (`objectives.exact.exact_objective`)."""
        assert self.X is not None
        return exact_objective(self.kernel, self.X, self._residual(), self.noise_rows(),
                               jitter)

    def _exact_posterior(self, jitter: float) -> ExactPosterior:
        """The exact GP's posterior of the data (`posteriors.exact_posterior`)."""
        assert self.X is not None
        return exact_posterior(self.kernel, self.X, self._residual(), self.noise_rows(),
                               jitter, self.prior_mean())

    def _target_signal_variance(self) -> float:
        """The kernel's starting variance: var(y − m(X)) of one output, the observed values'
        variance of several (NaN: missing)."""
        assert self.X is not None and self.y is not None
        with torch.no_grad():
            return signal_variance(self.y[~torch.isnan(self.y)] if self.y.dim() == 2
                                   else self._residual())

    # -- the noise ------------------------------------------------------------------------
    def _internal_noise(self, value: object) -> Tensor:
        return internal_noise(value, tuple(self.value("noise_variance").shape),
                              float(self.y_scale))

    def noise_rows(self) -> Tensor:
        """σ² (a scalar) or σ²_n of every data point [N], internal units, differentiable."""
        noise = self.value("noise_variance")
        if self.noise_codes is None:
            return noise
        if self.placement.sharded:  # σ²_n of this rank's rows: the gradient summed over ranks
            noise = summed_gradient(noise)
        return noise[self.noise_codes]

    @property
    def heteroscedastic(self) -> bool:
        """True when the noise differs per point or per group of points."""
        return self.value("noise_variance").dim() > 0

    @property
    def noise_groups(self) -> list[Any] | None:
        """The noise groups' labels (in the order of `noise_variance`), or None."""
        groups = self.spec.noise.groups
        return None if groups is None else list(groups)

    @property
    def noise_variance(self) -> Any:
        """Gaussian noise variance σ² in the units of y: a float, or an array with one value per
        noise group (`noise_groups`) or per data point (known heteroscedastic noise)."""
        return as_user_value(self.value("noise_variance")) * float(self.y_scale) ** 2

    @noise_variance.setter
    def noise_variance(self, v: Any) -> None:
        self.set_value("noise_variance", self._internal_noise(v))

    # -- what the objective and the checks read -------------------------------------------
    @property
    def num_outputs(self) -> int:
        """P: the output columns of y (1 for y [N])."""
        return int(self.spec.num_outputs or 1)

    def num_targets(self) -> int:
        """The observed target values: N, or N·P less the missing ones for several outputs."""
        return observed_targets(self.y, self.num_data, self.num_outputs)

    def _observed_targets(self) -> int:
        return self.num_targets()

    def collapsed_problem(self) -> CollapsedProblem | None:
        """The collapsed objective of a sparse model as a value (None: the exact GP)."""
        return None

    def diagnostic_view(self) -> RegressionView:
        """What the diagnostics read of this model (internal units): see `RegressionView`."""
        self._require_data()
        assert self.X is not None
        if self.num_outputs > 1:
            raise ValueError(f"diagnostics take one output; this model has {self.num_outputs} "
                             "(fit a single-output model per column to diagnose it)")
        problem = self.collapsed_problem()
        residual = self.zero_mean_targets()
        if problem is not None:
            problem = problem._replace(y=residual, mean=None)
        noise = self.noise_rows().detach()
        user_noise = float(noise.mean()) * float(self.y_scale) ** 2  # the mean when it varies
        return RegressionView(type(self).__name__, self.kernel, self.X, residual, noise,
                              self.jitter, self._objective_offset(), user_noise, self.x_shift,
                              self.x_scale, problem, self.placement.sharded,
                              self.feature_names)

    # -- training -------------------------------------------------------------------------
    def training_plan(self, options: FitOptions) -> TrainingPlan:
        """L-BFGS-B on the objective (+ log priors): `maxiter` (2000), `tol`, `progress`,
        `callback`; see `training.fit_lbfgsb`. Without `tol` it stops once its gains have
        stalled (`fitting.stall_rule`) or, where the model probes its predictions (GPR,
        SGPR), once they have settled (`fitting.settle_rule`); `tol` gives scipy's
        tolerances. Then, unless `diagnose=False`, the checks after fitting: a fit that
        stalled far from its data restarts from the data-based starting values
        (`fitting.restart_if_stuck`), and `diagnostics()` checks the model it ends with (one
        `sparsegp.ApproximationWarning` lists what tripped; they cost no more than the fit)."""
        return TrainingPlan("L-BFGS-B on the objective", self.fit_options, self._fit_lbfgsb)

    def _fit_lbfgsb(self, options: FitOptions) -> FitResult:
        if options.diagnose is False:
            return self._lbfgsb(options)
        start = Snapshot(self)
        result = self._lbfgsb(options)
        if not result.interrupted and self.restarts_if_stuck:
            result = restart_if_stuck(self, result, start, self._take_data_based_values,
                                      lambda: self._lbfgsb(options), stacklevel=5)
        if not result.interrupted:
            self._check_fit(stacklevel=6, result=result)
        return result

    def _lbfgsb(self, options: FitOptions) -> FitResult:
        """L-BFGS-B alone, with the stall and settling rules."""
        with threads_for(self.evaluation_work()):
            return fit_lbfgsb(self, maxiter=default(options.maxiter, MAXITER), tol=options.tol,
                              progress=options.progress, callback=options.callback,
                              lockstep=self.placement.sharded,
                              stall=stall_rule(self.num_data, options),
                              settle=settle_rule(options), probe=self._prediction_probe())

    def _prediction_probe(self) -> Callable[[], tuple[Tensor, Tensor]] | None:
        """The settling rule's probe (`training.settle.Probe`): the predictive mean and
        variance of y (internal units) at the training inputs `fitting.probe_rows` picks,
        from a posterior built without gradients and outside the posterior cache (the cache
        keeps whatever it held; it is keyed by the parameters' values anyway). None for a
        model that does not probe, or with data sharded over ranks (every rank must stop
        alike)."""
        if not self.probes_predictions or self.placement.sharded:
            return None
        assert self.X is not None
        rows = probe_rows(self.X)
        X = self.X[rows]

        def probe() -> tuple[Tensor, Tensor]:
            with torch.no_grad():
                mean, var = self._build_posterior().predict_f(X)
                noise = self.noise_rows().detach()
                if noise.dim() > 0:
                    noise = noise[rows]
                    if var.dim() == 2:
                        noise = noise[:, None]
                return mean, var + noise

        return probe

    def _take_data_based_values(self) -> None:
        """Give the trainable kernel hyperparameters and noise variance the starting values
        a model takes from its data when none are given (`restart_if_stuck`)."""
        assert self.X is not None
        with pooled_data(self, self.placement, POOLED_ROWS):
            sv = self._target_signal_variance()
            values = data_based_values(self.kernel, self.X, sv)
        for name, _, trainable, _ in list(self.kernel.named_values()):
            if trainable:
                current = self.kernel.value(name)
                value = values[name]
                self.kernel.set_value(name, value if value.shape == current.shape
                                      else value.mean())
        if self._raw("noise_variance").requires_grad:
            self.set_value("noise_variance", NOISE_FRACTION * sv)

    def _check_fit(self, stacklevel: int, result: FitResult) -> None:
        """After `fit()` (unless `diagnose=False`): the fitted model is checked by
        `diagnostics()` and one `sparsegp.ApproximationWarning` lists whatever tripped; a check
        that cannot be computed is reported the same way, never raised. With data sharded
        over torch.distributed ranks the checks see all the data (every rank runs them).
        The checks cost no more than the fit (`quadratic_rows_after_fit`)."""
        if self.num_outputs == 1:
            warn_if_unhealthy(self, stacklevel=stacklevel, quadratic_max_data=(
                quadratic_rows_after_fit(result.evaluations, getattr(self, "num_inducing", 0))))

    # -- predictions ----------------------------------------------------------------------
    def _observations(self, rows: int, noise_variance: ArrayLike | None,
                      noise_groups: ArrayLike | None) -> Noise:
        return new_points_noise(rows, self.value("noise_variance"), self.spec.noise.groups,
                                self.spec.noise.points is not None, float(self.y_scale),
                                noise_variance, noise_groups)

    def _new_targets(self, ynew: ArrayLike, rows: int) -> Tensor:
        t = (ynew.to(PARAMETER_DTYPE) if isinstance(ynew, Tensor)
             else torch.as_tensor(np.asarray(ynew, dtype=np.float64), dtype=PARAMETER_DTYPE))
        columns = self.num_outputs if self.spec.fantasies is None else self.spec.fantasies
        shape = [rows] if columns == 1 and not self._keeps_columns() else [rows, columns]
        if t.dim() == 2 and t.shape[1] == 1 and len(shape) == 1:
            t = t[:, 0]
        if list(t.shape) != shape:
            raise ValueError(f"ynew must have shape {shape} (one target per prediction); "
                             f"got {list(t.shape)}")
        return self.units.targets(t.to(self.device))

    def _keeps_columns(self) -> bool:
        return self.spec.fantasies is not None

    def _why_no_data(self) -> str:
        F = self.spec.fantasies
        return (super()._why_no_data() if F is None else
                f"is without its training data (it holds {F} fantasies of the targets of its "
                "last points, not one data set)")

    def _how_to_get_data(self) -> str:
        return (super()._how_to_get_data() if self.spec.fantasies is None else
                " (condition on one set of targets y [k] for a model that can)")

    def predict_f(self, Xnew: ArrayLike, full_cov: bool = False, full_output_cov: bool = False
                  ) -> tuple[Result, Result]:
        """Mean [N*] and variance [N*] (or covariance [N*, N*]) of the latent f* at Xnew
        [N*, D]; with P outputs, [N*, P] and [N*, P] (or one covariance per output,
        [P, N*, N*]), and with `full_output_cov` the [P, P] covariance of the outputs at
        each point [N*, P, P] (diagonal for independent outputs). In the units of y: numpy
        arrays for numpy inputs, differentiable torch tensors for a tensor Xnew (see
        `sparsegp.models.core.predictions`)."""
        self._check_output_cov(full_cov, full_output_cov)
        return super().predict_f(Xnew, full_cov, full_output_cov)

    def predict_y(self, Xnew: ArrayLike, full_cov: bool = False, full_output_cov: bool = False,
                  *, noise_variance: ArrayLike | None = None,
                  noise_groups: ArrayLike | None = None) -> tuple[Result, Result]:
        """Mean and variance (or covariance) of noisy observations y*, shaped as
        `predict_f`'s. A model whose noise differs per point needs the noise of the new
        points: their known `noise_variance` (a number or [N*], units of y), or their
        `noise_groups` labels (for a model fitted with `noise_groups`)."""
        self._check_output_cov(full_cov, full_output_cov)
        return super().predict_y(Xnew, full_cov, full_output_cov,
                                 noise_variance=noise_variance, noise_groups=noise_groups)

    def _check_output_cov(self, full_cov: bool, full_output_cov: bool) -> None:
        if full_output_cov and full_cov:
            raise ValueError("full_cov (over the points) and full_output_cov (over the outputs "
                             "at each point) cannot both be asked for")
        if full_output_cov and self.num_outputs == 1:
            raise ValueError("full_output_cov needs a model of several outputs, y [N, P]")

    def data_extras(self) -> dict[str, Tensor]:
        """The noise group (or point) of every data point, saved with the data."""
        return {} if self.noise_codes is None else {"noise_codes": self.noise_codes}


def check_several_outputs(y: Tensor, noise: NoiseSpec, mean: MeanLike, placement: Placement
                          ) -> None:
    """Several output columns share one noise variance and the units of y: no noise groups
    or per-point noise, no prior mean, and no missing outputs across shards."""
    if noise.count:
        raise ValueError("several output columns share one noise variance: noise_groups "
                         "and a noise_variance per point take one output")
    if not isinstance(as_mean(mean), Zero):
        raise ValueError("a prior mean takes one output; with several output columns use "
                         "standardize_y=True to remove each column's offset")
    if placement.sharded and bool(torch.isnan(y).any()):
        raise ValueError("missing outputs (NaN in y) are not supported with data sharded "
                         "over torch.distributed ranks")
