"""Sparse GP classification by Power EP (Bui, Yan & Turner 2017): SGPC."""

from __future__ import annotations

import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import torch
from torch import Tensor

from ... import covariances as cov
from ...diagnostics.latent import LatentDiagnostics, LatentView, diagnose_latent
from ...diagnostics.report import FAR_LENGTHSCALES, MERGE_FRACTION
from ...features.base import InducingFeature, InducingLike
from ...kernels.base import Kernel
from ...likelihoods import Bernoulli, Gaussian
from ...likelihoods.base import Likelihood
from ...means import MeanLike, Zero
from ...objectives import pep_classification as pep
from ...objectives.collapsed.members import Statistics, family, q_from_statistics
from ...objectives.online.regression import Summary
from ...posteriors import SparsePosterior
from ...runtime.chunking import auto_chunk_size
from ...runtime.config import DEFAULT_JITTER, PARAMETER_DTYPE
from ...runtime.threads import threads_for
from ...training import FitResult
from ...training import ep as schedules
from ...training.guard import FitGuard
from ...training.options import DEFAULT_LR
from ...validation import ArrayLike, as_tensor, check_finite, check_same_rows
from ..core import streaming
from ..core.data import Inputs, Placement
from ..core.fitting import FitOptions, TrainingPlan, default, round_stall_nats
from ..core.inducing import InducingInputs, extended_feature, resolve_feature
from ..core.labels import binary_classes
from ..core.model import Model, Parts, Targets
from ..core.noise import Noise
from ..core.options import InducingOptions
from ..core.predictions import Observations
from ..core.spec import ModelSpec


@dataclass(frozen=True, kw_only=True)
class SGPCOptions(InducingOptions):
    """`SGPC`'s options: the power α, the likelihood (None: Bernoulli with `link`), the
    damping of the site updates."""

    alpha: float
    link: str
    likelihood: Any
    damping: float

    def __post_init__(self) -> None:
        super().__post_init__()
        self._set("alpha", cast(float, family("pep", self.alpha).alpha))  # Power EP's power
        if not (isinstance(self.damping, numbers.Real) and 0.0 < self.damping <= 1.0):
            raise ValueError(f"damping must lie in (0, 1]; got {self.damping!r}")
        self._set("damping", float(self.damping))
        likelihood = Bernoulli(link=self.link) if self.likelihood is None else self.likelihood
        if not isinstance(likelihood, Likelihood) or likelihood.num_latent != 1:
            raise TypeError("likelihood must be a sparsegp likelihood of one latent function")
        self._set("likelihood", likelihood)


#: The EP sites' buffers: their precisions τ_n and natural means ν_n [N]
SITES = ("tau", "nu")


@dataclass(frozen=True, kw_only=True)
class SGPCSpec(ModelSpec):
    """`SGPC`'s spec: Power EP's power, the damping of the site updates, the rows per chunk,
    the classes of binary labels (None for other likelihoods' targets)."""

    alpha: float = 0.5
    damping: float = 0.5
    chunk_size: int | None = None
    classes: tuple[Any, ...] | None = None


class SGPC(Model[SGPCOptions]):
    """Sparse GP classification with M inducing variables by Power EP (power `alpha` in (0, 1]).

    Labels y [N] in {0, 1} or {−1, +1}; `link` "probit" (closed-form EP moments at α = 1) or
    "logit", or any single-output `likelihood` (e.g. Gaussian, for checking against SGPR).
    `inducing_points` as in `SGPR` (an int, an array or any registered inducing feature).
    Each data point has a Gaussian site on h_n = w_nᵀu; `fit()` alternates damped parallel
    site sweeps with L-BFGS-B on the hyperparameters and inducing variables (sites fixed), or
    with `schedule="stochastic"` updates minibatches of sites and takes Adam steps on the
    energy's unbiased minibatch estimate (`minibatch_energy`). Updates that would make a site
    precision negative (or whose cavity is invalid) are skipped and counted in `fit().info`.
    Shapes: X [N, D], y [N] -> `predict_proba(Xnew [N*, D])` P(`y*` = 1) `[N*]`, `predict` labels
    `[N*]` (numpy, in the training labels' convention: 0/1, ±1 or bool).

    Example:

        >>> import numpy as np, sparsegp as sg
        >>> X, y = sg.datasets.snelson()
        >>> labels = (y[::4] > 0).astype(int)
        >>> m = sg.SGPC(X[::4], labels, inducing_points=8)
        >>> result = m.fit(maxiter=1, inner_maxiter=5)
        >>> p = m.predict_proba(X[:5])
        >>> p.shape, bool(((p >= 0) & (p <= 1)).all()), m.classes
        ((5,), True, [0, 1])
        >>> set(m.predict(X[:5]).tolist()) <= {0, 1}
        True
    """

    spec: SGPCSpec
    spec_type: ClassVar[type[ModelSpec]] = SGPCSpec

    feature: InducingFeature
    likelihood: Likelihood
    tau: Tensor | None  # buffers [N]: the sites' precisions τ_n and natural means ν_n
    nu: Tensor | None
    inducing_points = InducingInputs()

    def __init__(
        self, X: ArrayLike, y: ArrayLike, kernel: Kernel | None = None,
        inducing_points: InducingLike = None, alpha: float = 0.5, link: str = "probit",
        likelihood: Likelihood | None = None, *, mean: MeanLike = None,
        jitter: float = DEFAULT_JITTER, damping: float = 0.5, chunk_size: int | None = None,
        inducing_init: str = "kmeans++", seed: int = 0, standardize_X: bool = False,
        dtype: torch.dtype | None = None,
    ) -> None:
        self._build_from_data(X, y, SGPCOptions(
            kernel=kernel, inducing_points=inducing_points, alpha=alpha, link=link,
            likelihood=likelihood, mean=mean, jitter=jitter, damping=damping,
            chunk_size=chunk_size, inducing_init=inducing_init, seed=seed,
            standardize_X=standardize_X, dtype=dtype))

    def _configure(self, inputs: Inputs, options: SGPCOptions, placement: Placement
                   ) -> tuple[dict[str, object], Parts]:
        o = options
        fields, parts = super()._configure(inputs, options, placement)
        parts["feature"] = resolve_feature(o.inducing_points, parts["kernel"],
                                           inputs.X, inputs.shift, inputs.scale,
                                           o.inducing_init, o.seed)
        parts["likelihood"] = o.likelihood
        fields.update(alpha=o.alpha, damping=o.damping, chunk_size=o.chunk_size)
        return fields, parts

    def _prepare_targets(self, y: ArrayLike, inputs: Inputs, parts: Parts,
                         options: SGPCOptions, placement: Placement) -> Targets:
        n = inputs.X.shape[0]
        t = as_tensor(y, "y", device=inputs.device)
        if t.dim() == 2 and t.shape[1] == 1:
            t = t[:, 0]
        if t.dim() != 1 or t.shape[0] != n:
            raise ValueError(f"y must be a vector of {n} labels (one per row of X); got shape "
                             f"{tuple(t.shape)}")
        check_finite(t, "y")
        likelihood = parts["likelihood"]
        labels = likelihood.check_training_targets(t.to(PARAMETER_DTYPE))
        zero = torch.zeros_like(labels)
        return Targets(labels, {}, {"tau": zero, "nu": zero.clone()},
                       {"classes": tuple(binary_classes(y, t))}, [])

    def _declare(self, spec: ModelSpec, parts: Parts) -> None:
        assert isinstance(spec, SGPCSpec)
        self.kernel = parts["kernel"].to(dtype=PARAMETER_DTYPE)
        self.mean = parts.get("mean", Zero()).to(dtype=PARAMETER_DTYPE)
        self._declare_units(spec.input_dim, targets=False)
        self.likelihood = parts["likelihood"].to(dtype=PARAMETER_DTYPE)
        self.feature = parts["feature"]
        self.register_buffer("tau", None, persistent=False)  # site precisions τ_n
        self.register_buffer("nu", None, persistent=False)  # site natural means ν_n

    def _initialise(self, options: SGPCOptions) -> None:
        assert self.X is not None and self.y is not None
        self.mean.initialise_from_data(self.X, torch.zeros_like(self.y))  # latent f, not labels
        self.kernel.initialise_from_data(self.X, 1.0)

    # -- what users read ------------------------------------------------------------------
    @property
    def alpha(self) -> float:
        return self.spec.alpha

    @property
    def damping(self) -> float:
        """The damping of the site updates, in (0, 1]."""
        return self.spec.damping

    @property
    def chunk_size(self) -> int | None:
        """The rows of data processed at a time (None: from a memory budget)."""
        return self.spec.chunk_size

    @property
    def classes(self) -> list[Any]:
        """The two label values of the training labels (predictions use the same)."""
        return list(self.spec.classes or ())

    def add_inducing_points(self, Znew: ArrayLike) -> None:
        """Append inducing points f(Znew) for Znew [K, D] (units of X) to the inducing
        variables; M grows by K and frozen parameters stay frozen. Nothing is refitted; the
        next prediction rebuilds the cached posterior from the data and the sites (a model
        loaded without its data refuses)."""
        self._require_data()
        self.feature = extended_feature(self.feature, self._internal_inputs(
            Znew, "inducing_points"), self.device)

    def _chunk(self) -> int:
        assert self.X is not None
        return self.chunk_size or auto_chunk_size(cov.width(self.feature, self.kernel),
                                                  self.X.element_size(), device=self.X.device)

    # -- energy and sites -----------------------------------------------------------------
    def _objective(self) -> Tensor:
        return self.minibatch_energy(None)

    def minibatch_energy(self, idx: Tensor | None, statistics_idx: Tensor | None = None,
                         totals: Callable[[Tensor], tuple[Tensor, Tensor]] | None = None
                         ) -> Tensor:
        """The Power-EP energy (`idx` None), or its unbiased estimate: q(u) from all the sites,
        the local terms of the sites `idx` and the sums' gradient from the sites
        `statistics_idx` (drawn independently of `idx`), each scaled by N/|batch|; `totals`
        (the stochastic schedule's running sums) saves the pass over all the sites. See
        `objectives.pep_classification.energy`."""
        if (idx is None) != (statistics_idx is None):
            raise ValueError("give both idx and statistics_idx (independent batches of sites) "
                             "or neither")
        batch = None if idx is None or statistics_idx is None else (idx, statistics_idx)
        X, y = self._data()
        tau, nu = self._sites()
        return pep.energy(self.kernel, self.feature, X, y, self.likelihood, tau,
                          nu, self.alpha, self.jitter, self._chunk(), batch=batch,
                          prior_mean=self.prior_mean(), totals=totals,
                          block=self._gaussian_block())

    def _sites(self) -> tuple[Tensor, Tensor]:
        """The sites' precisions τ [N] and natural means ν [N] (with the data)."""
        self._require_data()
        assert self.tau is not None and self.nu is not None
        return self.tau, self.nu

    def _gaussian_block(self) -> Callable[[Tensor], Statistics] | None:
        """L = chol(Kuu) ↦ the statistics of a Gaussian data block at its Power-EP fixed point
        that q(u) holds besides the sites (`pep.with_block`): none here; a `StreamingSGPC`'s
        old data."""
        return None

    def log_marginal_likelihood(self) -> float:
        """The Power-EP energy: an approximation to log p(y) at the current sites."""
        self._require_data()
        with torch.no_grad():
            return float(self._objective())

    def diagnostics(self, *, merge_fraction: float = MERGE_FRACTION,
                    far_lengthscales: float = FAR_LENGTHSCALES) -> LatentDiagnostics:
        """The Power-EP energy and where the inducing variables sit (merged pairs, far from
        every data point); see `sparsegp.diagnostics.diagnose_latent` for the thresholds.
        No upper bound on log p(y) exists here, so there is no sandwich."""
        return diagnose_latent(self._latent_view(), merge_fraction=merge_fraction,
                               far_lengthscales=far_lengthscales)

    def _latent_view(self) -> LatentView:
        """What `diagnostics` reads of this model."""
        X, _ = self._data()
        return LatentView(type(self).__name__, f"Power EP, α = {self.alpha:g}",
                          self.log_marginal_likelihood(),
                          "Power-EP energy, an approximation to log p(y)", self.feature,
                          self.kernel, X,
                          "Power EP with α near 1 (EP) clumps inducing inputs as FITC does, "
                          "Bauer et al. 2016" if self.alpha > 0.5 else
                          "spare inducing inputs stack up when fewer suffice")

    def _site_q(self, totals: Callable[[Tensor], tuple[Tensor, Tensor]] | None = None
                ) -> tuple[Tensor, float, Any]:
        """L = chol(Kuu), the jitter used, and the sites' whitened q(v) (docs/math.md §5), from a
        pass over all the sites or from `totals` (L ↦ their sums (A, c))."""
        L, used = cov.Kuu_cholesky(self.feature, self.kernel, self.jitter)
        X, _ = self._data()
        tau, nu = self._sites()
        stats = (pep.site_statistics(self.kernel, self.feature, X, L, tau, nu,
                                     self._chunk()) if totals is None
                 else pep.sums(*totals(L), self.num_data))
        block = self._gaussian_block()
        if block is not None:
            stats, _ = pep.with_block(stats, block(L))
        return L, used, q_from_statistics(stats)

    def site_marginals(self, idx: Tensor | None = None,
                       totals: Callable[[Tensor], tuple[Tensor, Tensor]] | None = None
                       ) -> pep.Marginals:
        """Marginals of h_n at the rows `idx` (all if None) under the current sites; `totals`
        (L ↦ the sums (A, c)) replaces the pass over all the sites that computes them."""
        L, _, q = self._site_q(totals)
        X, _ = self._data()
        X = X if idx is None else X[idx]
        return pep.marginals(self.kernel, self.feature, X, L, q, self._chunk(), self.prior_mean())

    def update_sites(self, max_sweeps: int = 200, tol: float = 1e-6,
                     batch: Tensor | None = None) -> dict[str, int]:
        """Damped parallel site sweeps (all sites, or the rows `batch`) until they stop changing;
        see `training.ep.site_sweeps`. Returns the sweeps run and updates skipped."""
        self._require_data()
        with threads_for(self.evaluation_work()):
            return schedules.site_sweeps(self, max_sweeps, tol, batch)

    def update(self, X_new: ArrayLike, y_new: ArrayLike, inducing_points: InducingLike = None,
               fit: bool = True, **fit_options: Any) -> SGPC:
        """Streaming update (Bui, Nguyen & Turner 2017) with Power EP: a `StreamingSGPC` that
        has seen this model's data, through its posterior q(u) alone, and the new batch
        X_new [N_new, D], labels y_new [N_new] (in this model's convention, or targets of its
        likelihood).

        This model: inducing points and a zero prior mean, any single-latent likelihood; one
        loaded without its data will do, as long as its saved posterior is current. The new
        model starts from the old hyperparameters, keeps the old units, α, damping and
        likelihood, and starts the new batch's sites at zero. `inducing_points` as in
        `SGPR.update`: None or an int M chooses M inputs by seeded k-means++ from the old
        inducing inputs and X_new together; an array [M, D] (units of X) or an
        `InducingPoints` is taken as given (`model.inducing_points` keeps the old ones).
        With `fit` (default) the model is then fitted as an SGPC is (`fit_options`: those of
        `fit`); `fit=False` only sweeps the new sites to convergence (`update_sites()`) at
        the old hyperparameters. A batch may hold one class only. Cost O(N·M² + M³); the old
        data are never needed.

        Kept inducing inputs and hyperparameters (b = a, `fit=False`, jitter=0): with a
        Gaussian likelihood the posterior is the batch posterior of all the data seen; with
        any other, it is Power EP on the new batch with q_old(a) as the prior (the old data's
        sites are not revisited, so it differs slightly from the batch SGPC's posterior).
        See `sparsegp.models.core.streaming`."""
        return cast(SGPC, streaming.update(self, X_new, y_new, inducing_points, fit,
                                           fit_options))

    def _stream_summary(self) -> Summary:
        """The summary of the posterior q(a) an update carries, or a clear error."""
        return streaming.summary_of(self, "the Power-EP posterior of one latent function (an "
                                          "SGPC's)")

    def _stream_batch(self, X_new: ArrayLike, y_new: ArrayLike) -> streaming.Batch:
        """X_new in this model's internal units and y_new as its likelihood takes them (labels
        mapped to {0, 1}), both float64; labels must follow the model's convention."""
        check_same_rows(X_new, y_new)
        X = self._internal_inputs(X_new, "X_new").detach()
        t = as_tensor(y_new.detach() if isinstance(y_new, Tensor) else y_new, "y_new",
                      device=self.device)
        if t.dim() == 2 and t.shape[1] == 1:
            t = t[:, 0]
        if t.dim() != 1 or t.shape[0] != X.shape[0]:
            raise ValueError(f"y_new must be a vector of {X.shape[0]} targets (one per row of "
                             f"X_new); got shape {tuple(t.shape)}")
        t = check_finite(t, "y_new").to(PARAMETER_DTYPE)
        if isinstance(self.likelihood, Bernoulli):
            allowed = {float(c) for c in self.classes}
            bad = sorted(set(torch.unique(t).tolist()) - allowed)
            if bad:
                raise ValueError(f"y_new holds labels {', '.join(f'{v:g}' for v in bad[:5])} "
                                 f"outside this model's classes {self.classes}: give the new "
                                 "batch's labels in the convention of the training labels")
        return streaming.Batch(X, self.likelihood.check_targets(t))

    def _stream_extras(self, batch: streaming.Batch) -> dict[str, Tensor]:
        """The new batch's sites, at zero."""
        return {"tau": torch.zeros_like(batch.y), "nu": torch.zeros_like(batch.y)}

    def _stream_state(self, old: Summary, feature: InducingFeature) -> dict[str, Tensor]:
        return streaming.summary_state(old)

    fit_options = frozenset({"maxiter", "tol", "progress", "callback", "schedule",
                             "inner_maxiter", "max_sweeps", "batch_size", "epochs", "lr",
                             "sweeps_per_batch", "seed", "refresh_every"})
    _FULL = frozenset({"maxiter", "tol", "callback", "inner_maxiter", "max_sweeps",
                       "schedule"})
    _STOCHASTIC = frozenset({"batch_size", "epochs", "lr", "sweeps_per_batch", "seed",
                             "refresh_every", "schedule", "callback"})

    def training_plan(self, options: FitOptions) -> TrainingPlan:
        """Alternate site updates and hyperparameter steps; see the class docstring.

        Full schedule (`schedule="full"`, the default): up to `maxiter` (20) rounds of (sweeps
        to convergence, at most `max_sweeps` (200), then L-BFGS-B for `inner_maxiter` (50)
        iterations), until the energy changes by less than `tol` (1e-6)·(1 + |F|) or, when
        `tol` is not given, a round changes it by less than 0.1·max(1, N/1000) nats
        (`fitting.round_stall_nats`). Measured on friedman1's
        labels (N = 5,000): rounds 4–20 changed the test error by ≤ 0.0004 and the test NLPD
        by ≤ 0.0001 while the energy crept up 1.4 nats; the rule stops after round 4 (0.41
        nats) instead of running all 20 (26 s instead of 127 s).
        Stochastic schedule: `epochs` (50) passes over minibatches of `batch_size` (256)
        sites, `sweeps_per_batch` (2) sweeps of a batch's sites before each Adam step (`lr`,
        0.01; batches drawn with `seed`, 0); q(u)'s sums over all the sites are kept running
        and recomputed every `refresh_every` steps (default: as often as the steps' own cost
        allows, at most every 10 steps). Options of the other schedule give a warning.
        Ctrl-C (or SIGTERM) at any moment of either, the setup and the final sweeps included,
        stops at the last accepted state; the result says it was interrupted.
        """
        schedule = default(options.schedule, "full")
        if schedule == "full":
            return TrainingPlan("the full schedule", self._FULL, self._fit_full,
                                'schedule="stochastic"')
        if schedule == "stochastic":
            return TrainingPlan("the stochastic schedule", self._STOCHASTIC,
                                self._fit_stochastic, 'schedule="full"')
        raise ValueError(f"schedule must be 'full' or 'stochastic'; got {schedule!r}")

    def _fit_full(self, o: FitOptions) -> FitResult:
        with FitGuard(self) as guard, threads_for(self.evaluation_work()):
            return schedules.fit_full(self, default(o.maxiter, 20), default(o.tol, 1e-6),
                                      o.progress, o.callback, default(o.inner_maxiter, 50),
                                      default(o.max_sweeps, 200),
                                      round_stall_nats(self.num_data, o))
        return guard.interrupted_result()

    def _fit_stochastic(self, o: FitOptions) -> FitResult:
        with FitGuard(self) as guard, threads_for(self.evaluation_work()):
            return schedules.fit_stochastic(
                self, default(o.batch_size, 256), default(o.epochs, 50),
                default(o.lr, DEFAULT_LR), default(o.sweeps_per_batch, 2), default(o.seed, 0),
                o.progress, o.refresh_every, o.callback)
        return guard.interrupted_result()

    # -- persistence ----------------------------------------------------------------------
    def data_extras(self) -> dict[str, Tensor]:
        """The sites, saved with the data so that a loaded model can continue fitting."""
        return {name: site for name in SITES if (site := getattr(self, name)) is not None}

    def _restore_posterior(self, saved: dict[str, Any]) -> SparsePosterior:
        return SparsePosterior.from_state(self.kernel, self.feature, saved, self.prior_mean())

    # The sites are q(u)'s parameters, one per data point: `state_dict()` carries them (as
    # GPyTorch's variational parameters), so that `new.load_state_dict(old.state_dict())`
    # restores the fit; `save` keeps them with the data (`data_extras`).
    def _save_to_state_dict(self, destination: Any, prefix: str, keep_vars: bool) -> None:
        super()._save_to_state_dict(destination, prefix, keep_vars)
        for name, site in self.data_extras().items():
            if site is not None:
                destination[prefix + name] = site if keep_vars else site.detach()

    def _load_from_state_dict(self, state_dict: Any, prefix: str, local_metadata: Any,
                              strict: bool, missing_keys: list[str], unexpected_keys: list[str],
                              error_msgs: list[str]) -> None:
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs)
        for name in SITES:
            key = prefix + name
            if key not in state_dict:
                continue
            if key in unexpected_keys:
                unexpected_keys.remove(key)
            value = state_dict[key]
            if self.y is not None and tuple(value.shape) != tuple(self.y.shape):
                error_msgs.append(f"{name}: {tuple(value.shape)} sites for the model's "
                                  f"{self.y.shape[0]} data points")
                continue
            setattr(self, name, value.detach().clone().to(device=self.device,
                                                          dtype=PARAMETER_DTYPE))

    # -- posterior and prediction ---------------------------------------------------------
    def _build_posterior(self) -> SparsePosterior:
        L, used, q = self._site_q()
        return SparsePosterior(self.kernel, self.feature, L, q,
                               torch.zeros((), dtype=L.dtype, device=L.device), used,
                               self.prior_mean())

    def _observations(self, rows: int, noise_variance: ArrayLike | None,
                      noise_groups: ArrayLike | None) -> Observations:
        self._no_new_noise(noise_variance, noise_groups)
        if isinstance(self.likelihood, Gaussian):
            return Noise(self.likelihood.value("variance"))
        return self.likelihood

    def _new_targets(self, ynew: ArrayLike, rows: int) -> Tensor:
        """Observed labels (in the training labels' convention), as the likelihood takes
        them."""
        y = as_tensor(ynew, "ynew", device=self.device)
        y = check_finite(y.reshape(-1), "ynew").to(PARAMETER_DTYPE)
        if y.shape[0] != rows:
            raise ValueError(f"ynew must have one label per row of Xnew ({rows}); got "
                             f"{y.shape[0]}")
        return self.likelihood.check_targets(y)
