"""Gaussian-likelihood regression models (GPR, SGPR): noise variance and units of y."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

import numpy as np
import torch
from torch import Tensor

from .. import distributed
from ..diagnostics import (
    Diagnostics,
    RegressionView,
    diagnose,
    quadratic_rows_after_fit,
    warn_if_unhealthy,
)
from ..diagnostics.starts import data_based_values
from ..distributed import is_distributed
from ..means import Zero, as_mean
from ..objectives.blocks import label_codes
from ..objectives.collapsed import CollapsedProblem
from ..parameters import as_user_value, at_least_above
from ..runtime.config import NOISE_FLOOR, PARAMETER_DTYPE
from ..training import FitResult
from ..training.result import Snapshot
from ..validation import as_output_targets, as_targets, target_scale_problems
from .base import NOISE_FRACTION, Model
from .fitting import FitOptions, probe_rows, restart_if_stuck
from .options import RegressionOptions
from .predictions import gaussian_log_density
from .units import TargetUnits

#: The options type of a regression model (`options.RegressionOptions` or a subclass).
R = TypeVar("R", bound=RegressionOptions)



class GPModel(TargetUnits, Model[R]):
    """A GP regression model with Gaussian noise; see `GPR` and `SGPR`.

    With `standardize_y` (the default) the model works on (y − mean)/std (`TargetUnits`);
    predictions, the noise variance and the objectives are reported in the units of y, while
    the kernel's (and a prior mean's) parameters live in those internal units.
    """

    #: y may have P output columns (independent outputs sharing kernel, inducing variables and
    #: noise; NaN marks a missing output): SGPR says yes
    multi_output = False

    noise_codes: Tensor | None  # buffer [N]: the noise variance of every point, or None

    #: the default L-BFGS-B fit also stops once the predictions have settled
    #: (`fitting.settle_rule`; `_prediction_probe`): GPR and SGPR say yes
    probes_predictions = False

    def _prepare_targets(self, y: Any, n: int, device: torch.device, parts: dict[str, Any],
                         options: R) -> tuple[Tensor, dict[str, Tensor], dict[str, Any]]:
        if self.multi_output:
            y = as_output_targets(y, n, "y", device=device).to(PARAMETER_DTYPE)
        else:
            y = as_targets(y, n, "y", device=device).to(PARAMETER_DTYPE)
        noise, codes = noise_structure(options.noise_variance, options.noise_groups, n)
        buffers = self._target_units(y, options.standardize_y, noise, options.mean)
        targets = self._in_target_units(y, buffers)
        if codes is not None:
            buffers["noise_codes"] = codes
        config: dict[str, Any] = {"noise": noise}
        if y.dim() == 2:
            config["num_outputs"] = y.shape[1]
        return targets, buffers, config

    def _target_scale_problems(self, y: Tensor, buffers: dict[str, Tensor], options: R
                               ) -> list[str]:
        # a prior mean other than zero takes the offset (None and Zero() leave it to the GP)
        zero_mean = isinstance(as_mean(options.mean), Zero)
        if options.standardize_y:
            return []
        if y.dim() == 1:
            return target_scale_problems(y, zero_mean)
        return [f"output {p}: {problem}" for p in range(y.shape[1])
                for problem in target_scale_problems(y[~torch.isnan(y[:, p]), p], zero_mean)]

    def _build(self, config: dict[str, Any], parts: dict[str, Any]) -> None:
        super()._build(config, parts)
        self._declare_target_units(config.get("num_outputs"))  # a shift per output, one scale
        # σ² (one), or one per group of points (`noise_groups`), or one per point (known,
        # heteroscedastic: frozen); `noise_codes` [N] maps points to them
        noise = config.get("noise") or {}
        count = len(noise["groups"]) if "groups" in noise else noise.get("points", 0)
        self._add_positive("noise_variance", torch.ones(count) if count else 1.0, NOISE_FLOOR)
        self.register_buffer("noise_codes", None, persistent=False)
        if "points" in noise:
            self.freeze("noise_variance")

    def _initialise(self, options: R) -> None:
        super()._initialise(options)
        noise_variance = options.noise_variance
        sv = self._target_signal_variance()
        self.kernel.initialise_from_data(self.X, sv)
        shape = self.value("noise_variance").shape
        value = (torch.full(shape, NOISE_FRACTION * sv, dtype=PARAMETER_DTYPE)
                 if noise_variance is None
                 else self._noise_to_internal(noise_variance))
        self.set_value("noise_variance", torch.as_tensor(value, dtype=PARAMETER_DTYPE)
                       .expand(shape).clone())

    def _noise_to_internal(self, value: Any) -> Any:
        shape = tuple(self.value("noise_variance").shape)
        try:
            v = torch.as_tensor(np.asarray(value, dtype=np.float64), dtype=PARAMETER_DTYPE)
        except (TypeError, ValueError, RuntimeError):
            v = None
        what = "a finite number" if not shape else f"a number or {shape[0]} numbers"
        if (v is None or v.dim() > 1 or (v.dim() == 1 and tuple(v.shape) != shape)
                or not bool(torch.isfinite(v).all()) or bool((v <= 0).any())):
            raise ValueError(f"noise_variance must be {what} > 0; got {_short(value)}")
        # the floor holds in the internal units (those of the standardised y, if standardised);
        # a value at the floor (as a fit that ends there reads) is taken as just above it
        scale2 = float(self.y_scale) ** 2
        internal = v / scale2
        if bool((internal < NOISE_FLOOR * (1 - 1e-9)).any()):
            raise ValueError(f"noise_variance must be at least {NOISE_FLOOR * scale2:.4g} in the "
                             f"units of y (the least noise the model represents: {NOISE_FLOOR:g} "
                             f"in its internal units); got {_short(value)}")
        return at_least_above(internal, NOISE_FLOOR)

    def noise_rows(self) -> Tensor:
        """σ² (a scalar) or σ²_n of every data point [N], internal units, differentiable."""
        noise = self.value("noise_variance")
        if self.noise_codes is None:
            return noise
        if self.shards_data:  # σ²_n of this rank's rows: the groups' gradient summed over ranks
            noise = distributed.summed_gradient(noise)
        return noise[self.noise_codes]

    @property
    def heteroscedastic(self) -> bool:
        """True when the noise differs per point or per group of points."""
        return self.value("noise_variance").dim() > 0

    @property
    def noise_groups(self) -> list | None:
        """The noise groups' labels (in the order of `noise_variance`), or None."""
        return (self._config.get("noise") or {}).get("groups")

    @property
    def noise_variance(self) -> Any:
        """Gaussian noise variance σ² in the units of y: a float, or an array with one value per
        noise group (`noise_groups`) or per data point (known heteroscedastic noise)."""
        return as_user_value(self.value("noise_variance")) * float(self.y_scale) ** 2

    @noise_variance.setter
    def noise_variance(self, v: Any) -> None:
        self.set_value("noise_variance", self._noise_to_internal(v))

    def log_marginal_likelihood(self) -> float:
        """The objective being maximised (exact log evidence, bound or PEP energy), as a float."""
        self._require_data()
        with torch.no_grad():
            return float(self._objective()) + self._objective_offset()

    #: L-BFGS-B (`Model.training_plan`), then the checks after fitting unless `diagnose=False`
    fit_options = Model.fit_options | {"diagnose"}

    def _fit_lbfgsb(self, options: FitOptions) -> FitResult:
        """L-BFGS-B from the current values, then (unless `diagnose=False`) the checks after
        fitting: a fit that stalled far from its data restarts from the data-based starting
        values (`fitting.restart_if_stuck`), and `diagnostics()` checks the model it ends
        with (`_check_fit`)."""
        quiet = dataclasses.replace(options, diagnose=False)
        if options.diagnose is False:
            return super()._fit_lbfgsb(quiet)
        start = Snapshot(self)
        result = super()._fit_lbfgsb(quiet)
        if not result.interrupted:
            result = restart_if_stuck(self, result, start, self._take_data_based_values,
                                      lambda: super(GPModel, self)._fit_lbfgsb(quiet))
        if not result.interrupted:
            self._check_fit(stacklevel=5, result=result)
        return result

    def _prediction_probe(self) -> Any:
        """The settling rule's probe (`training.settle.Probe`): the predictive mean and
        variance of y (internal units) at `PROBES` training inputs spread evenly over the
        rows, from a posterior built without gradients and outside the posterior cache (the
        cache keeps whatever it held; it is keyed by the parameters' values anyway). None
        for a model that does not probe, or with data sharded over ranks (every rank must
        stop alike)."""
        if not self.probes_predictions or (self.shards_data and is_distributed()):
            return None
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
        with self._pooled_data():
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

    def diagnostic_view(self) -> RegressionView:
        """What the diagnostics read of this model (internal units): see `RegressionView`."""
        self._require_data()
        if self.num_outputs > 1:
            raise ValueError(f"diagnostics take one output; this model has {self.num_outputs} "
                             "(fit a single-output model per column to diagnose it)")
        problem = self.collapsed_problem()
        residual = self.zero_mean_targets()
        if problem is not None:
            problem = problem._replace(y=residual, mean=None)
        noise = self.noise_rows().detach()
        user_noise = float(noise.mean()) * float(self.y_scale) ** 2  # the mean when it varies
        return RegressionView(type(self).__name__, self.kernel, self.X, residual,
                              noise, self.jitter,
                              self._objective_offset(), user_noise, self.x_shift,
                              self.x_scale, problem,
                              self.shards_data and is_distributed(), self.feature_names)

    def collapsed_problem(self) -> CollapsedProblem | None:
        """The collapsed objective of a sparse model as a value (None: the exact GP)."""
        return None


    def predict(self, Xnew: Any, full_cov: bool = False, include_noise: bool = False, *,
                noise_variance: Any = None, noise_groups: Any = None,
                full_output_cov: bool = False) -> tuple[Any, Any]:
        """Posterior mean [N*] and variance [N*] (or covariance [N*, N*]) at Xnew [N*, D];
        with P outputs, [N*, P] and [N*, P] (or one covariance per output, [P, N*, N*]), and
        with `full_output_cov` the [P, P] covariance of the outputs at each point [N*, P, P]
        (diagonal for independent outputs).

        Latent f* by default; `include_noise=True` gives the predictive of noisy y*. A model
        whose noise differs per point needs the noise of the new points then: their known
        `noise_variance` (a number or [N*], units of y), or their `noise_groups` labels (for a
        model fitted with `noise_groups`). In the units of y: numpy arrays for numpy inputs,
        differentiable torch tensors for a tensor Xnew (see `sparsegp.models.predictions`).
        """
        with self._predicting(Xnew) as call:
            if full_output_cov:
                mean, var = self._predict_output_cov(call, full_cov, include_noise)
            else:
                mean, var = call.posterior.predict_f(call.X, full_cov)
                if include_noise:
                    n = call.X.shape[0]
                    noise = self._new_noise(n, noise_variance, noise_groups).to(var.dtype)
                    if full_cov:
                        noise = torch.diag_embed(noise.expand(n))
                    elif var.dim() == 2 and noise.dim() == 1:  # columns: outputs, fantasies
                        noise = noise[:, None]
                    var = var + noise
            s = self.y_scale
            return call.out(mean * s + self.y_shift, var * s * s)

    def _predict_output_cov(self, call: Any, full_cov: bool, include_noise: bool
                            ) -> tuple[Tensor, Tensor]:
        """Mean [N*, P] and the [P, P] covariance of the outputs at each point [N*, P, P]
        (diagonal for independent outputs; W diag(·) Wᵀ plus the posterior's coupling for the
        linear model of coregionalisation), internal units."""
        if full_cov:
            raise ValueError("full_cov (over the points) and full_output_cov (over the outputs "
                             "at each point) cannot both be asked for")
        if self.num_outputs == 1:
            raise ValueError("full_output_cov needs a model of several outputs, y [N, P]")
        post = call.posterior
        if hasattr(post, "predict_output_cov"):
            mean, cov = post.predict_output_cov(call.X)
        else:
            mean, var = post.predict_f(call.X)
            cov = torch.diag_embed(var)
        if include_noise:
            cov = cov + self.value("noise_variance") * torch.eye(
                cov.shape[-1], dtype=cov.dtype, device=cov.device)
        return mean, cov

    def _new_noise(self, n: int, noise_variance: Any, noise_groups: Any) -> Tensor:
        """σ² at n new points, internal units: the model's, or the given values or groups."""
        if noise_variance is not None and noise_groups is not None:
            raise ValueError("give noise_variance or noise_groups for the new points, not both")
        if noise_groups is not None:
            if self.noise_groups is None:
                raise ValueError("noise_groups: this model has no noise groups")
            index = {g: i for i, g in enumerate(self.noise_groups)}
            labels = np.asarray(noise_groups).reshape(-1).tolist()
            unknown = [g for g in labels if g not in index]
            if len(labels) != n or unknown:
                raise ValueError(f"noise_groups must be {n} labels of the fitted groups "
                                 f"{self.noise_groups}; got {len(labels)} labels"
                                 + (f", unknown {unknown[:3]}" if unknown else ""))
            codes = torch.as_tensor([index[g] for g in labels], device=self.device)
            return self.value("noise_variance")[codes]
        if noise_variance is not None:
            v = torch.as_tensor(np.asarray(noise_variance, dtype=np.float64), dtype=PARAMETER_DTYPE,
                                device=self.device)
            if v.dim() > 1 or (v.dim() == 1 and v.shape[0] != n) or not bool(
                    (torch.isfinite(v) & (v > 0)).all()):
                raise ValueError(f"noise_variance of the new points must be a positive number or "
                                 f"{n} of them; got {_short(noise_variance)}")
            return v / float(self.y_scale) ** 2
        if self.heteroscedastic:
            raise ValueError("this model's noise differs per point: predicting noisy y* needs "
                             "the noise of the new points (noise_variance=..., or noise_groups="
                             "... for a model fitted with noise_groups)")
        return self.value("noise_variance")

    def predict_f(self, Xnew: Any, full_cov: bool = False, **options: Any) -> tuple[Any, Any]:
        """Mean and variance (or covariance) of the latent f*; see `predict`."""
        return self.predict(Xnew, full_cov, **options)

    def predict_y(self, Xnew: Any, full_cov: bool = False, **options: Any) -> tuple[Any, Any]:
        """Mean and variance (or covariance) of noisy observations y*; `options` (the new
        points' noise, `full_output_cov`) as in `predict`."""
        return self.predict(Xnew, full_cov, include_noise=True, **options)

    def predict_log_density(self, Xnew: Any, ynew: Any, **noise: Any) -> Any:
        """log p(y* | data) at each test point [N*] (one per output [N*, P] for several,
        NaN where y* is missing), in the units of y: the Gaussian predictive of y*
        (`predict_y`) at its observed value. `noise` as in `predict`."""
        return gaussian_log_density(*self.predict_y(Xnew, **noise), ynew)

    def data_extras(self) -> dict[str, Tensor]:
        """The noise group (or point) of every data point, saved with the data."""
        return {} if self.noise_codes is None else {"noise_codes": self.noise_codes}


def noise_structure(noise_variance: Any, noise_groups: Any, n: int
                    ) -> tuple[dict[str, Any], Tensor | None]:
    """The noise's config entry and the code of every point: {} and None for one σ²;
    {"groups": labels} for one σ² per group of `noise_groups`; {"points": n} for known
    per-point noise (`noise_variance` an array of n values)."""
    if noise_groups is not None:
        labels, codes = label_codes(noise_groups, n, "noise_groups")
        return {"groups": labels.tolist()}, torch.as_tensor(codes, dtype=torch.long)
    try:
        shape = np.shape(noise_variance)
    except (TypeError, ValueError):
        shape = ()
    if len(shape) == 0:
        return {}, None
    if shape != (n,):
        raise ValueError(f"noise_variance must be a number or one value per data point "
                         f"({n},); got shape {shape}")
    return {"points": n}, torch.arange(n)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class Bounded:
    """`diagnostics()` of the models whose objective bounds (or is) the exact evidence: GPR
    and SGPR (the others report what they can, each in its own way)."""

    def diagnostics(self, **kwargs: Any) -> Diagnostics:
        """Is the approximation good? Bounds, their gap, noise and inducing-input checks.

        See `sparsegp.diagnostics.diagnose` for the checks and their thresholds (`kwargs`).
        """
        return diagnose(self, **kwargs)
