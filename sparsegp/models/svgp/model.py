"""Stochastic variational GPs (SVGP; Hensman et al. 2013, 2015) for any likelihood: q(u) per
latent function, the ELBO on all the data or its minibatch estimate, several outputs and the
linear model of coregionalisation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, cast

import numpy as np
import torch
from torch import Tensor, nn

from ... import conditionals
from ... import covariances as cov
from ...diagnostics import Diagnostics, RegressionView, diagnose
from ...diagnostics.latent import LatentDiagnostics, LatentView, diagnose_latent
from ...diagnostics.report import (
    EXACT_MAX_DATA,
    FAR_LENGTHSCALES,
    GAP_PER_POINT,
    MERGE_FRACTION,
    NOISE_FRACTION,
    QUADRATIC_MAX_DATA,
)
from ...features.base import InducingFeature, InducingLike
from ...features.inducing_points import InducingPoints
from ...features.stacked import Stacked
from ...kernels.base import Kernel
from ...likelihoods import Gaussian
from ...likelihoods.base import Likelihood
from ...linalg import jittered_cholesky, solve_lower
from ...means import Mean, MeanLike
from ...objectives import svgp as objective
from ...objectives.collapsed.members import VFE, CollapsedProblem, titsias_upper_bound
from ...objectives.online.svgp import OldPosterior, old_posterior
from ...posteriors import Posterior, SeparatePosterior, SparsePosterior
from ...runtime.chunking import auto_chunk_size
from ...runtime.config import DEFAULT_JITTER, PARAMETER_DTYPE
from ...training import FitResult, natural_gradient_step
from ...validation import ArrayLike, check_same_rows
from ..core import streaming
from ..core.data import Inputs, Placement, observed_targets
from ..core.fitting import FitOptions, TrainingPlan
from ..core.inducing import InducingInputs, extended_feature, resolve_feature
from ..core.mixing import MixingView, mixing_parameter, start_mixing
from ..core.model import Model, Parts, Targets
from ..core.noise import Noise
from ..core.predictions import Observations
from ..core.regression import NOISE_FRACTION as START_NOISE_FRACTION
from ..core.regression import signal_variance
from ..core.spec import ModelSpec
from ..core.units import target_units
from . import training
from .targets import SVGPOptions, batch_targets, checked_targets, standardizes_y, target_problems


@dataclass(frozen=True, kw_only=True)
class SVGPSpec(ModelSpec):
    """`SVGP`'s spec: whitening, the latent functions, the rows per chunk, a mean-field q(u),
    the output columns of y (None for y [N]), the LMC's mixing matrix's shape [P, L], the
    classes of binary labels."""

    whiten: bool = True
    num_latent: int = 1
    chunk_size: int | None = None
    mean_field: bool = False
    num_outputs: int | None = None
    mixing: tuple[int, int] | None = None
    classes: tuple[Any, ...] | None = None


class SVGP(Model[SVGPOptions]):
    """The uncollapsed variational GP: q(u) = N(m, S) per latent function, any likelihood.

    Shapes: X [N, D], y [N]; or y [N, P] for P outputs with a Gaussian likelihood (its
    `variance` one number shared by the outputs, or P of them), NaN marking a missing output:
    P independent latent functions sharing the kernel and the inducing variables by default,
    or, with `mixing=W` [P, L] (trainable), the linear model of coregionalisation f = W g of L
    independent latent functions g (the likelihood sees the P outputs; predictions are of the
    outputs, [N*, P], and `predict_f(..., full_output_cov=True)` gives the [P, P] covariance at
    each point). `kernel=sg.kernels.Separate([...])` gives each latent function (output) its
    own kernel and inducing variables (equal numbers of them; `whiten=True`), e.g. for the
    mean and the log noise of `HeteroscedasticGaussian`. `whiten=True` (default)
    parameterises q(v), u = L v. `num_latent` latent functions (default: what the likelihood
    needs) share the kernel and the inducing variables (`inducing_points` as in `SGPR`: an
    int, an array or any registered inducing feature). `fit()` uses Adam on the
    hyperparameters and natural gradients on q(u) over minibatches, or full-batch L-BFGS for a
    Gaussian likelihood without minibatches. Under an initialised torch.distributed process
    group, `fit()` trains with DistributedDataParallel and a DistributedSampler over (X, y).

    With `Stacked` inducing features (one set per part of a sum of kernels, van der Wilk 2018,
    §5.7.2), q(u) couples the sets by default (one full covariance); `mean_field=True` makes it
    block diagonal, q(u) = Π_i q(u_i) (the Cholesky factor is masked to its diagonal blocks),
    trained by Adam (natural gradients are taken for a full covariance only).
    `standardize_y` (Gaussian likelihood) models (y − mean)/std inside, as SGPR does: the ELBO,
    `noise_variance` and a given likelihood variance are in the units of y; other
    likelihoods take y as it is and refuse it. Its default (None) is True for the Gaussian
    likelihood; predictions, samples and densities are in the units of y.
    Shapes: q_mu [M, L], q_sqrt [L, M, M] for L latent functions; `predict_y(Xnew [N*, D])`
    -> mean, var `[N*]` (or `[N*, P]`); `predict_proba` `[N*]` or `[N*, C]`.

    Example:

        >>> import numpy as np, sparsegp as sg
        >>> X, y = sg.datasets.snelson()
        >>> m = sg.SVGP(X, y, inducing_points=10)  # Gaussian likelihood
        >>> result = m.fit(maxiter=5)  # full batch: L-BFGS-B, then the optimal q(u)
        >>> tuple(m.q_mu.shape), tuple(m.q_sqrt.shape)
        ((10, 1), (1, 10, 10))
        >>> m.predict_y(X[:3])[0].shape
        (3,)
        >>> clf = sg.SVGP(X, (y > 0).astype(float), likelihood=sg.likelihoods.Bernoulli(),
        ...               inducing_points=10)
        >>> clf.predict_proba(X[:3]).shape
        (3,)
    """

    spec: SVGPSpec
    spec_type: ClassVar[type[ModelSpec]] = SVGPSpec
    posterior_needs_data: ClassVar[bool] = False  # q(u) and the hyperparameters are it
    separate_kernels: ClassVar[bool] = True
    fit_options: ClassVar[frozenset[str]] = frozenset({
        "maxiter", "tol", "progress", "callback", "diagnose", "batch_size", "epochs", "lr",
        "natgrad", "gamma", "seed", "data"})

    feature: InducingFeature
    likelihood: Likelihood
    q_mu: nn.Parameter  # [M, L]
    q_sqrt: nn.Parameter  # [L, M, M]
    mixing_matrix: nn.Parameter | None  # W [P, L] of the LMC, or None
    y_shift: Tensor  # buffers: y is stored as (y − y_shift)/y_scale (Gaussian likelihood)
    y_scale: Tensor
    inducing_points = InducingInputs()
    mixing = MixingView()

    def __init__(
        self, X: ArrayLike, y: ArrayLike, kernel: Kernel | None = None,
        likelihood: Likelihood | None = None, inducing_points: InducingLike = None, whiten: bool = True,
        num_latent: int | None = None, *, mean: MeanLike = None, jitter: float = DEFAULT_JITTER,
        chunk_size: int | None = None, inducing_init: str = "kmeans++", seed: int = 0,
        standardize_X: bool = False, standardize_y: bool | None = None,
        dtype: torch.dtype | None = None, mean_field: bool = False,
        mixing: ArrayLike | None = None,
    ) -> None:
        self._build_from_data(X, y, SVGPOptions(
            kernel=kernel, likelihood=likelihood, inducing_points=inducing_points, whiten=whiten,
            num_latent=num_latent, mean=mean, jitter=jitter, chunk_size=chunk_size,
            inducing_init=inducing_init, seed=seed, mean_field=mean_field, mixing=mixing,
            standardize_X=standardize_X, standardize_y=standardize_y, dtype=dtype))

    # -- construction ---------------------------------------------------------------------
    def _configure(self, inputs: Inputs, options: SVGPOptions, placement: Placement
                   ) -> tuple[dict[str, object], Parts]:
        o = options
        likelihood = o.likelihood
        C = likelihood.num_latent if o.num_latent is None else o.num_latent
        if likelihood.num_latent > 1 and C != likelihood.num_latent:
            raise ValueError(f"num_latent must be {likelihood.num_latent} for this likelihood; "
                             f"got {C}")
        fields, parts = super()._configure(inputs, options, placement)
        parts["feature"] = resolve_feature(o.inducing_points, parts["kernel"],
                                           inputs.X, inputs.shift, inputs.scale,
                                           o.inducing_init, o.seed)
        parts["likelihood"] = likelihood
        if o.mean_field and not isinstance(parts["feature"], Stacked):
            raise ValueError("mean_field=True factorises q(u) over the inducing sets of Stacked "
                             "features (a sum of kernels with one feature per part); got "
                             f"{type(parts['feature']).__name__}")
        fields.update(whiten=o.whiten, num_latent=C, chunk_size=o.chunk_size,
                      mean_field=o.mean_field)
        return fields, parts

    def _prepare_targets(self, y: ArrayLike, inputs: Inputs, parts: Parts,
                         options: SVGPOptions, placement: Placement) -> Targets:
        o = options
        likelihood = parts["likelihood"]
        standardize = standardizes_y(likelihood, o.standardize_y)
        t, fields = checked_targets(y, inputs.X.shape[0], inputs.device, likelihood, o.mixing,
                                    o.num_latent, o.mean)
        problems = target_problems(t, likelihood, o.mean, o.standardize_y)
        if not isinstance(likelihood, Gaussian):  # labels, counts: y as given
            return Targets(t, {}, {}, fields, problems)
        units = target_units(t, standardize, placement)  # as a regression model's
        return Targets((t - units["y_shift"]) / units["y_scale"], units, {}, fields, problems)

    def _declare(self, spec: ModelSpec, parts: Parts) -> None:
        assert isinstance(spec, SVGPSpec)
        self.kernel = parts["kernel"].to(dtype=PARAMETER_DTYPE)
        self.mean = parts["mean"].to(dtype=PARAMETER_DTYPE)
        # y_shift, y_scale as a regression model's (0 and 1, y as given, for other likelihoods)
        self._declare_units(spec.input_dim, spec.num_outputs)
        self.likelihood = parts["likelihood"].to(dtype=PARAMETER_DTYPE)
        self.feature = parts["feature"]
        M, C = self.feature.num_inducing, spec.num_latent
        self.q_mu = nn.Parameter(torch.zeros(M, C, dtype=PARAMETER_DTYPE))
        self.q_sqrt = nn.Parameter(torch.eye(M, dtype=PARAMETER_DTYPE).expand(C, M, M).clone())
        self.mixing_matrix = mixing_parameter(spec.mixing)  # W [P, L] of the LMC, or None
        pairs = cov.separate_pairs(self.feature, self.kernel)
        if pairs is not None:
            if len(pairs) != C:
                raise ValueError(f"kernels.Separate has {len(pairs)} kernels for {C} latent "
                                 "functions: give one per latent function (output)")
            blocks = [f.num_inducing for f, _ in pairs]
            if not spec.whiten:
                raise ValueError("kernels.Separate in SVGP needs whiten=True")
            if len(set(blocks)) > 1:
                raise ValueError("kernels.Separate in SVGP needs the same number of inducing "
                                 f"variables for every latent function; got {blocks} (SGPR "
                                 "takes different numbers)")

    def _initialise(self, options: SVGPOptions) -> None:
        assert self.X is not None and self.y is not None
        start_mixing(self.mixing_matrix, options.mixing)
        if self.y.dim() == 1:  # several outputs: no prior mean (refused), y may hold NaN
            latent = self.likelihood.latent_start(self.y)  # a constant starts at y's mean
            self.mean.initialise_from_data(self.X, torch.zeros_like(self.y) if latent is None
                                           else latent)
        sv = 1.0
        if isinstance(self.likelihood, Gaussian):
            if "variance" not in self.likelihood._unset and float(self.y_scale) != 1.0:
                # a variance given is in the units of y, as SGPR's noise_variance
                self.likelihood.set_value("variance", self.likelihood.value("variance").detach()
                                          / float(self.y_scale) ** 2)
            if self.y.dim() == 1:  # as SGPR starts
                with torch.no_grad():
                    sv = signal_variance(self.y - self.mean(self.X))
                self.likelihood.initialise_from_data(START_NOISE_FRACTION * sv)
        self.kernel.initialise_from_data(self.X, sv)
        if not self.whiten:  # start at the prior, S = Kuu
            with torch.no_grad():
                self.q_sqrt.copy_(self._cholesky_kuu().expand_as(self.q_sqrt))

    @classmethod
    def _from_file(cls, config: dict[str, Any], state: dict[str, Tensor]
                   ) -> tuple[ModelSpec, Parts, dict[str, Tensor]]:
        spec, parts, state = super()._from_file(config, state)
        # files saved before SVGP had the units of y hold y as given: shift 0, scale 1
        P = config.get("num_outputs")
        state.setdefault("y_shift", torch.zeros(() if P is None else (P,), dtype=PARAMETER_DTYPE))
        state.setdefault("y_scale", torch.ones((), dtype=PARAMETER_DTYPE))
        return spec, parts, state

    # -- what users read ------------------------------------------------------------------
    @property
    def whiten(self) -> bool:
        """q(u) is parameterised in the whitened coordinates v = L⁻¹u."""
        return self.spec.whiten

    @property
    def mean_field(self) -> bool:
        """q(u) factorised over the inducing sets of Stacked features."""
        return self.spec.mean_field

    @property
    def chunk_size(self) -> int | None:
        """The rows of data processed at a time (None: from a memory budget)."""
        return self.spec.chunk_size

    @property
    def num_latent(self) -> int:
        return self.q_mu.shape[1]

    @property
    def num_outputs(self) -> int:
        """P: the output columns of y (1 for y [N])."""
        return int(self.spec.num_outputs or 1)

    @property
    def classes(self) -> list[Any] | None:
        """The two label values of binary targets (Bernoulli), else None."""
        return None if self.spec.classes is None else list(self.spec.classes)

    @property
    def noise_variance(self) -> float | np.ndarray:
        """The Gaussian likelihood's variance σ² in the units of y (one number, or one per
        output); `likelihood.variance` is that of the internal, standardised targets."""
        if not isinstance(self.likelihood, Gaussian):
            raise AttributeError(f"noise_variance is the Gaussian likelihood's; this SVGP's is "
                                 f"{type(self.likelihood).__name__}")
        return self.likelihood.variance * float(self.y_scale) ** 2

    def num_targets(self) -> int:
        """The observed target values: N, or N·P less the missing ones for several outputs."""
        return observed_targets(self.y, self.num_data, self.num_outputs)

    def _observed_targets(self) -> int:
        return self.num_targets()

    def add_inducing_points(self, Znew: ArrayLike) -> None:
        """Append inducing points f(Znew) for Znew [K, D] (units of X) to the inducing
        variables; M grows by K and frozen parameters stay frozen. q(u) grows with them: the
        old q on the first M, the prior's conditional on the new ones (exact in whitened
        coordinates: chol of the grown Kuu starts with the old factor). Nothing is refitted."""
        M_old = self.q_mu.shape[0]
        self.feature = extended_feature(self.feature, self._internal_inputs(
            Znew, "inducing_points"), self.device)
        M = self.feature.num_inducing
        with torch.no_grad():
            L = self._cholesky_kuu()
            q = conditionals.from_parameters(L[:M_old, :M_old], self.q_mu, self.q_sqrt,
                                             self.whiten)
            C = q.mean.shape[1]
            mean = torch.cat([q.mean, q.mean.new_zeros(M - M_old, C)])
            root = torch.eye(M, dtype=q.root.dtype, device=q.root.device).repeat(C, 1, 1)
            root[:, :M_old, :M_old] = q.root
            if not self.whiten:
                mean, root = L @ mean, L @ root
        self.q_mu = nn.Parameter(mean, requires_grad=self.q_mu.requires_grad)
        self.q_sqrt = nn.Parameter(root, requires_grad=self.q_sqrt.requires_grad)

    # -- the bound ------------------------------------------------------------------------
    def _cholesky_kuu(self) -> Tensor:
        return cov.Kuu_cholesky(self.feature, self.kernel, self.jitter)[0]

    def _chunk(self) -> int:
        assert self.X is not None
        width = cov.width(self.feature, self.kernel) + self.num_inducing * self.num_latent
        return self.chunk_size or auto_chunk_size(width, self.X.element_size(),
                                                  device=self.X.device)

    def elbo(self, X: Tensor | None = None, y: Tensor | None = None, q_mu: Tensor | None = None,
             q_sqrt: Tensor | None = None) -> Tensor:
        """The ELBO (total, not per datum): on all data, or an unbiased estimate from the
        minibatch (X, y) in internal units. q(u) may be overridden (natural gradients). In the
        internal units of y (`log_marginal_likelihood` gives it in the units of y)."""
        X, y = (self.X, self.y) if X is None else (X, y)  # a minibatch comes with its y
        assert X is not None and y is not None
        return objective.elbo(self.kernel, self.feature, self.likelihood, X, y,
                              self._cholesky_kuu(), self.q_mu if q_mu is None else q_mu,
                              self._root(self.q_sqrt if q_sqrt is None else q_sqrt), self.whiten,
                              self.num_data, self._chunk(), self.prior_mean(), self.mixing_matrix)

    def _root(self, q_sqrt: Tensor) -> Tensor:
        """The Cholesky factor of q's covariance: lower triangle, and for `mean_field` only the
        diagonal blocks of the Stacked feature's inducing sets."""
        if not self.mean_field:
            return q_sqrt
        mask = torch.block_diag(*(torch.ones(m, m, dtype=q_sqrt.dtype, device=q_sqrt.device)
                                  for m in cast(Stacked, self.feature).blocks))
        return q_sqrt.tril() * mask

    def _objective(self) -> Tensor:
        return self.elbo()

    @property
    def natural_steps_can_overshoot(self) -> bool:
        """Under a likelihood of unbounded curvature (Poisson's and the heteroscedastic noise's
        exponential links, and any likelihood that does not declare `bounded_curvature`) a
        natural-gradient step can lower the bound by orders of magnitude: minibatch training
        then halves such steps (`training.minibatch`)."""
        return not self.likelihood.bounded_curvature

    def prior_mean(self) -> Mean | None:
        """The prior mean as the objectives take it: None when zero; shared by the latent
        functions, or only on the one the likelihood names (`mean_latent`: f, not the log
        noise g, of `HeteroscedasticGaussian`)."""
        mean = super().prior_mean()
        column = self.likelihood.mean_latent
        if mean is None or column is None or self.num_latent == 1:
            return mean
        return OnOneLatent(mean, column, self.num_latent)

    def forward(self, X: Tensor, y: Tensor) -> Tensor:
        """Minus the minibatch ELBO estimate (and log priors): what DDP and Adam minimise
        (internal units, as `elbo`; `fit` reports it in the units of y)."""
        return -(self.elbo(X, y) + self.log_prior())

    def internal_batch(self, Xb: ArrayLike, yb: ArrayLike) -> tuple[Tensor, Tensor]:
        """A batch (X, y) in the user's units as the objective takes it (internal units)."""
        return self._internal_inputs(Xb, "a batch of X"), self._internal_targets(yb)

    def _internal_targets(self, yb: ArrayLike, name: str = "a batch of y",
                          rows: int | None = None) -> Tensor:
        """Targets in the units of y, checked (`targets.batch_targets`), in the internal units
        the objective takes: (y − y_shift)/y_scale under a Gaussian likelihood, labels as
        they are."""
        t = batch_targets(yb, self.likelihood, self.spec.num_outputs, self.dtype, self.device,
                          name, rows)
        return self.units.targets(t) if isinstance(self.likelihood, Gaussian) else t

    # -- training -------------------------------------------------------------------------
    def natural_gradient_step(self, gamma: float = 1.0, X: Tensor | None = None,
                              y: Tensor | None = None) -> float:
        """One natural-gradient step of size γ on q(u) with the ELBO of (X, y) (all data if
        None; see `training.natural_gradient_step`). γ = 1 with all the data and a Gaussian
        likelihood lands on the optimal q(u). Returns the step taken."""
        if self.mean_field:
            raise ValueError("natural gradients are taken for a full q(u) covariance; this model "
                             "has mean_field=True (fit() trains its q(u) by Adam)")
        return natural_gradient_step(lambda mean, root: self.elbo(X, y, q_mu=mean, q_sqrt=root),
                                     self.q_mu, self.q_sqrt, gamma)

    def training_plan(self, options: FitOptions) -> TrainingPlan:
        """Every option has a default that works for a few thousand points.

        Gaussian likelihood, `batch_size=None` and no `data`: full-batch L-BFGS-B (`maxiter`,
        default 2000; `tol`, else the stall rule of `fitting.stall_rule` or, for one output,
        once the predictions under the optimal q(u) have settled, `fitting.settle_rule`) on
        the hyperparameters with q(u) at its optimum throughout — the collapsed bound
        (Titsias 2009), which is the ELBO maximised over q(u) — then one natural-gradient
        step of size 1 puts q(u) at that optimum; with `diagnose` (default) and one output
        the fitted model is then checked as `SGPR.fit` checks it (`diagnostics()`; one
        `sparsegp.ApproximationWarning` lists what tripped, never an error). A minibatch fit
        is not checked (the checks cost several passes over the data): call `diagnostics()`.
        Otherwise minibatches of `batch_size` (default min(N, 256)) from (X, y) or from `data`
        (a DataLoader of (X, y) batches in the units of X) for `epochs` (default: about 2,000
        steps, drawn with `seed`, default 0), each step an Adam step (`lr`, default 0.01) on
        the hyperparameters and, with `natgrad` (default True), a natural-gradient step of size
        `gamma` (default 0.1) on q(u) — or Adam on q(u) too without `natgrad`. Options of the
        way not taken give a warning that names them. Ctrl-C (or SIGTERM) at any moment of
        either plan, the setup and the work after training included, stops at the last
        completed step."""
        why = self._why_minibatch(options.batch_size, options.data)
        if why is None:
            return TrainingPlan("full-batch L-BFGS-B (`maxiter`)",
                                frozenset({"maxiter", "tol", "callback", "diagnose", "natgrad"}),
                                self._fit_collapsed, "minibatch training (batch_size or data "
                                "given)")
        return TrainingPlan(f"minibatch training because of {why} (`epochs` sets its length)",
                            self.fit_options - {"maxiter", "tol", "diagnose"},
                            self._fit_minibatch,
                            "the full-batch L-BFGS-B fit (a Gaussian likelihood without "
                            "batch_size or data)")

    def _fit_collapsed(self, options: FitOptions) -> FitResult:
        return training.fit_collapsed(self, options)

    def _fit_minibatch(self, options: FitOptions) -> FitResult:
        return training.fit_by_minibatches(self, options)

    def _why_minibatch(self, batch_size: int | None, data: object) -> str | None:
        """Why `fit` trains by minibatches (None: it fits the collapsed bound by L-BFGS-B)."""
        return training.why_minibatch(self, batch_size, data)

    # -- the posterior and predictions ----------------------------------------------------
    def _build_posterior(self) -> Posterior:
        L = self._cholesky_kuu()
        q = conditionals.from_parameters(L, self.q_mu, self._root(self.q_sqrt), self.whiten)
        pairs = cov.separate_pairs(self.feature, self.kernel)
        zero = torch.zeros((), dtype=L.dtype, device=L.device)
        if pairs is not None:
            parts = [SparsePosterior(k, f, L[c], q.column(c), zero, self.jitter)
                     for c, (f, k) in enumerate(pairs)]
            return SeparatePosterior(parts, zero, self.prior_mean())
        return SparsePosterior(self.kernel, self.feature, L, q, zero, self.jitter,
                               self.prior_mean())

    def _restore_posterior(self, saved: dict[str, Any]) -> Posterior:
        pairs = cov.separate_pairs(self.feature, self.kernel)
        if pairs is not None:
            return SeparatePosterior.from_state(pairs, saved, self.prior_mean())
        return SparsePosterior.from_state(self.kernel, self.feature, saved, self.prior_mean())

    def _output_mixing(self) -> Tensor | None:
        return self.mixing_matrix

    def _observations(self, rows: int, noise_variance: ArrayLike | None,
                      noise_groups: ArrayLike | None) -> Observations:
        self._no_new_noise(noise_variance, noise_groups)
        if isinstance(self.likelihood, Gaussian):
            return Noise(self.likelihood.value("variance"))
        return self.likelihood

    def _new_targets(self, ynew: ArrayLike, rows: int) -> Tensor:
        return self._internal_targets(ynew, "ynew", rows)

    # -- streaming ------------------------------------------------------------------------
    def update(self, X_new: ArrayLike, y_new: ArrayLike, inducing_points: InducingLike = None,
               fit: bool = True, **fit_options: Any) -> SVGP:
        """Streaming update, any likelihood (Bui, Nguyen & Turner 2017): a `StreamingSVGP`
        that has seen this model's data through its q(u) alone, and the new batch X_new
        [N, D], y_new [N] (units of X and y).

        This model: inducing points, a zero prior mean, one kernel shared by its latent
        functions and no mixing matrix; any likelihood. The new model starts from the old
        hyperparameters and keeps the old units. `inducing_points` as in `SGPR.update`: None
        or an int M chooses M inputs by seeded k-means++ from the old inducing inputs and
        X_new together; an array or `InducingPoints` is taken as given
        (`model.inducing_points` keeps the old ones). q(b) starts at the old q when b = a,
        else at the prior. With `fit` (default) the model is then fitted (`fit_options`:
        those of `fit`; minibatch training); `fit=False` returns it as assembled. Cost
        O(N·M² + M³); the old data are never needed.

        With b = a, the same hyperparameters and a Gaussian likelihood, the optimal q(b) (one
        natural-gradient step of size 1) is the batch VFE posterior of all the data seen; for
        other likelihoods the old data's term is the Gaussian that matches their expected
        log-likelihood at q_old, so the result is close to, not equal to, the batch
        posterior. See `sparsegp.models.core.streaming`."""
        return cast(SVGP, streaming.update(self, X_new, y_new, inducing_points, fit,
                                           fit_options))

    def _stream_summary(self) -> OldPosterior:
        """The old posterior an update carries (q_old and p_old), or a clear error."""
        if self.mixing_matrix is not None or self.num_outputs != 1:
            raise ValueError("streaming updates take a model of one output, y [N] (no mixing "
                             "matrix)")
        streaming.check_streamable(self)
        with torch.no_grad():
            L = self._cholesky_kuu()
            q = conditionals.from_parameters(L, self.q_mu, self._root(self.q_sqrt), self.whiten)
            return old_posterior(cast(InducingPoints, self.feature).locations(), L, q)

    def _stream_batch(self, X_new: ArrayLike, y_new: ArrayLike) -> streaming.Batch:
        check_same_rows(X_new, y_new)
        X = self._internal_inputs(X_new, "X_new")
        return streaming.Batch(X, self._internal_targets(y_new, "y_new", X.shape[0]))

    def _stream_extras(self, batch: streaming.Batch) -> dict[str, Tensor]:
        return {}

    def _stream_state(self, old: OldPosterior, feature: InducingFeature) -> dict[str, Tensor]:
        """The old posterior in the streamed model's buffers, and its q(b): the old q where
        b = a (the same inputs), else the old posterior at b (`_projected_q`)."""
        state = dict(zip(("old_Z", "old_L", "old_mean", "old_root"), old, strict=True))
        Z = cast(InducingPoints, feature).Z
        if Z.shape == old.Z.shape and bool((Z == old.Z.to(Z)).all()):
            state.update(q_mu=self.q_mu.detach(), q_sqrt=self.q_sqrt.detach())
        else:
            state.update(self._projected_q(feature))
        return state

    def _projected_q(self, feature: InducingFeature) -> dict[str, Tensor]:
        """q(b) = N(m_b, S_b), this model's posterior of f at the new inducing inputs b (its
        predictive of f there), whitened by the new prior K'_bb = L_bL_bᵀ when `whiten`
        (q(v) = N(L_b⁻¹m_b, L_b⁻¹S_bL_b⁻ᵀ)). With the hyperparameters unchanged this q(b) is
        what the old data say of b, so the streamed fit starts from the old posterior
        instead of the prior, which it would otherwise have to recover from the old data's
        term while the hyperparameters already move (and forget)."""
        Z = cast(InducingPoints, feature).Z.detach()
        M, C = Z.shape[0], self.num_latent
        with torch.no_grad():
            mean, S = self.posterior().predict_f(Z, full_cov=True)  # [M(, C)], [(C,) M, M]
            mean = mean.reshape(M, C).to(PARAMETER_DTYPE)
            S = S.reshape(-1, M, M).expand(C, M, M).to(PARAMETER_DTYPE)
            if self.whiten:
                L = cov.Kuu_cholesky(feature, self.kernel, self.jitter)[0].to(PARAMETER_DTYPE)
                mean = solve_lower(L, mean)
                S = solve_lower(L, solve_lower(L, S).mT)
            roots = [jittered_cholesky(0.5 * (S[c] + S[c].mT), self.jitter,
                                       name="q(b), the old posterior at the new inducing "
                                       "inputs")[0] for c in range(C)]
        return {"q_mu": mean.clone(), "q_sqrt": torch.stack(roots)}

    # -- diagnostics ----------------------------------------------------------------------
    def collapsed_problem(self) -> CollapsedProblem:
        """The collapsed bound (Titsias 2009) at this model's kernel, inducing variables and
        noise, internal units: the ELBO's maximum over q(u). A Gaussian likelihood and one
        output (several outputs and mixing couple the bound: no single problem)."""
        self._require_data()
        if not isinstance(self.likelihood, Gaussian):
            raise ValueError("the collapsed bound, its upper bound and the diagnostics need a "
                             "Gaussian likelihood; this SVGP's is "
                             f"{type(self.likelihood).__name__}")
        if self.num_outputs > 1 or self.mixing_matrix is not None:
            raise ValueError(f"the collapsed bound, its upper bound and the diagnostics take "
                             f"one output; this SVGP has {self.num_outputs}"
                             + (" and a mixing matrix" if self.mixing_matrix is not None else "")
                             + " (fit a single-output model per column to diagnose it)")
        return self._bound_problem()

    def _bound_problem(self) -> CollapsedProblem:
        assert self.X is not None and self.y is not None
        return CollapsedProblem(self.kernel, self.feature, self.X, self.y,
                                self.likelihood.value("variance"), VFE, self.jitter,
                                self.chunk_size, mean=self.prior_mean())

    def upper_bound(self) -> float:
        """Titsias (2014) upper bound on the exact log evidence at the current hyperparameters
        and inducing variables (Gaussian likelihood, one output)."""
        with torch.no_grad():
            return float(titsias_upper_bound(self.collapsed_problem())) + self._objective_offset()

    def diagnostic_view(self) -> RegressionView:
        """What the diagnostics read of this model: the collapsed problem, with the ELBO at
        this q(u) as the model's objective (see `RegressionView`)."""
        problem = self.collapsed_problem()
        residual = self.zero_mean_targets()
        with torch.no_grad():
            elbo = float(self.elbo())
        noise = problem.noise.detach()
        assert self.X is not None
        return RegressionView(
            type(self).__name__, self.kernel, self.X, residual, noise, self.jitter,
            self._objective_offset(), float(self.units.variance(noise)), self.x_shift,
            self.x_scale, problem._replace(y=residual, mean=None), self.placement.sharded,
            self.feature_names, objective=elbo,
            approximation="ELBO, mean-field q(u)" if self.mean_field else "ELBO",
            objective_remedy=("a mean-field q(u) cannot reach it: the gap includes the cost of "
                              "the factorisation; train longer" if self.mean_field else
                              "train longer; one natural-gradient step of size 1 on all the "
                              "data reaches it: model.natural_gradient_step(1.0)"))

    def _bounded(self) -> bool:
        """Whether the diagnostics have bounds here (a Gaussian likelihood, one output)."""
        return (isinstance(self.likelihood, Gaussian) and self.num_outputs == 1
                and self.mixing_matrix is None)

    def diagnostics(self, *, merge_fraction: float = MERGE_FRACTION,
                    far_lengthscales: float = FAR_LENGTHSCALES,
                    noise_fraction: float = NOISE_FRACTION,
                    gap_per_point: float = GAP_PER_POINT, exact_max_data: int = EXACT_MAX_DATA,
                    extra_inducing: int | None = None, overestimate_nats: float | None = None,
                    quadratic_max_data: int = QUADRATIC_MAX_DATA
                    ) -> Diagnostics | LatentDiagnostics:
        """Is the approximation good? With a Gaussian likelihood and one output: the ELBO
        against the VFE bound (its maximum over q(u)) and the upper bound, with the noise and
        inducing-input checks of `sparsegp.diagnostics.diagnose` (its thresholds). Otherwise
        (no upper bound exists): the ELBO and the inducing-input checks
        (`sparsegp.diagnostics.diagnose_latent`, which takes `merge_fraction` and
        `far_lengthscales`)."""
        if self._bounded():
            return diagnose(self, merge_fraction=merge_fraction,
                            far_lengthscales=far_lengthscales, noise_fraction=noise_fraction,
                            gap_per_point=gap_per_point, exact_max_data=exact_max_data,
                            extra_inducing=extra_inducing, overestimate_nats=overestimate_nats,
                            quadratic_max_data=quadratic_max_data)
        return diagnose_latent(self._latent_view(), merge_fraction=merge_fraction,
                               far_lengthscales=far_lengthscales)

    def _latent_view(self) -> LatentView:
        """What `diagnose_latent` reads of this model."""
        self._require_data()
        assert self.X is not None
        with torch.no_grad():
            elbo = float(self.elbo()) + self._objective_offset()  # the units of y
        return LatentView(type(self).__name__, f"ELBO, {type(self.likelihood).__name__}",
                          elbo, "ELBO, a lower bound on log p(y)", self.feature, self.kernel,
                          self.X, "a variational fit stacks spare inducing inputs on top of "
                          "each other when fewer suffice")


class OnOneLatent(Mean):
    """m(x) on latent function `column` of C, zero on the others: X [N, D] -> [N, C]."""

    def __init__(self, mean: Mean, column: int, num_latent: int) -> None:
        super().__init__()
        self.mean, self.column, self.num_latent = mean, column, num_latent

    def config(self) -> dict[str, Any]:
        return {"type": type(self).__name__, "args": {
            "mean": self.mean.config(), "column": self.column, "num_latent": self.num_latent}}

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> OnOneLatent:
        args = cfg["args"]
        return cls(Mean.registry.build(args["mean"]), args["column"], args["num_latent"])

    def forward(self, X: Tensor) -> Tensor:
        m = self.mean(X)
        out = m.new_zeros(X.shape[0], self.num_latent)
        out[:, self.column] = m
        return out
