"""Sparse GP classification by Power EP (Bui, Yan & Turner 2017): SGPC."""

from __future__ import annotations

import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import Tensor
from torch.distributions import Distribution

from .. import covariances as cov
from ..diagnostics.latent import LatentDiagnostics, LatentView, diagnose_latent
from ..kernels.base import Kernel
from ..likelihoods import Bernoulli, Gaussian
from ..likelihoods.base import Likelihood
from ..objectives import pep_classification as pep
from ..objectives.collapsed import Statistics, family, q_from_statistics
from ..posteriors import SparsePosterior
from ..runtime.chunking import auto_chunk_size
from ..runtime.config import DEFAULT_JITTER, PARAMETER_DTYPE
from ..runtime.threads import threads_for
from ..training import FitResult
from ..training import ep as schedules
from ..training.guard import FitGuard
from ..training.options import DEFAULT_LR
from ..validation import as_tensor, check_finite
from .base import Model
from .classes import MODELS
from .fitting import FitOptions, TrainingPlan, default, round_stall_nats
from .inducing import InducingMixin, resolve_feature
from .labels import binary_classes, classifies, predicted_labels
from .options import InducingOptions
from .predictions import gaussian, label_distribution, tensor_of


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


class SGPC(InducingMixin, Model[SGPCOptions]):
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

    def __init__(
        self, X: Any, y: Any, kernel: Kernel | None = None, inducing_points: Any = None,
        alpha: float = 0.5, link: str = "probit", likelihood: Likelihood | None = None, *,
        mean: Any = None, jitter: float = DEFAULT_JITTER, damping: float = 0.5, chunk_size: int | None = None,
        inducing_init: str = "kmeans++", seed: int = 0, standardize_X: bool = False,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__(X, y, SGPCOptions(
            kernel=kernel, inducing_points=inducing_points, alpha=alpha, link=link,
            likelihood=likelihood, mean=mean, jitter=jitter, damping=damping,
            chunk_size=chunk_size, inducing_init=inducing_init, seed=seed,
            standardize_X=standardize_X, dtype=dtype))

    def _configure(self, X: Tensor, options: SGPCOptions, x_shift: Tensor, x_scale: Tensor
                   ) -> tuple[dict[str, Any], dict[str, Any]]:
        config, parts = super()._configure(X, options, x_shift, x_scale)
        parts["feature"] = resolve_feature(options.inducing_points, parts["kernel"], X, x_shift,
                                           x_scale, options.inducing_init, options.seed)
        parts["likelihood"] = options.likelihood
        config.update(alpha=options.alpha, damping=options.damping,
                      chunk_size=options.chunk_size)
        return config, parts

    def _prepare_targets(self, y: Any, n: int, device: torch.device, parts: dict[str, Any],
                         options: SGPCOptions
                         ) -> tuple[Tensor, dict[str, Tensor], dict[str, Any]]:
        t = as_tensor(y, "y", device=device)
        if t.dim() == 2 and t.shape[1] == 1:
            t = t[:, 0]
        if t.dim() != 1 or t.shape[0] != n:
            raise ValueError(f"y must be a vector of {n} labels (one per row of X); got shape "
                             f"{tuple(t.shape)}")
        check_finite(t, "y")
        labels = parts["likelihood"].check_training_targets(t.to(PARAMETER_DTYPE))
        return labels, {}, {"classes": binary_classes(y, t)}

    def _build(self, config: dict[str, Any], parts: dict[str, Any]) -> None:
        super()._build(config, parts)
        self.likelihood = parts["likelihood"].to(dtype=PARAMETER_DTYPE)
        self.feature = parts["feature"]
        self._alpha, self.damping = float(config["alpha"]), float(config["damping"])
        self.chunk_size, self.classes = config["chunk_size"], list(config["classes"])
        self.register_buffer("tau", None, persistent=False)  # site precisions τ_n
        self.register_buffer("nu", None, persistent=False)  # site natural means ν_n

    def _initialise(self, options: SGPCOptions) -> None:
        self.mean.initialise_from_data(self.X, torch.zeros_like(self.y))  # latent f, not labels
        self.kernel.initialise_from_data(self.X, 1.0)
        self.tau, self.nu = torch.zeros_like(self.y), torch.zeros_like(self.y)

    # -- what users read ------------------------------------------------------------------
    @property
    def alpha(self) -> float:
        return self._alpha

    def _chunk(self) -> int:
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
        return pep.energy(self.kernel, self.feature, self.X, self.y, self.likelihood, self.tau,
                          self.nu, self._alpha, self.jitter, self._chunk(), batch=batch,
                          prior_mean=self.prior_mean(), totals=totals,
                          block=self._gaussian_block())

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

    def diagnostics(self, **kwargs: Any) -> LatentDiagnostics:
        """The Power-EP energy and where the inducing variables sit (merged pairs, far from
        every data point); see `sparsegp.diagnostics.diagnose_latent` (`kwargs`: its
        thresholds). No upper bound on log p(y) exists here, so there is no sandwich."""
        return diagnose_latent(self._latent_view(), **kwargs)

    def _latent_view(self) -> LatentView:
        """What `diagnostics` reads of this model."""
        self._require_data()
        return LatentView(type(self).__name__, f"Power EP, α = {self._alpha:g}",
                          self.log_marginal_likelihood(),
                          "Power-EP energy, an approximation to log p(y)", self.feature,
                          self.kernel, self.X,
                          "Power EP with α near 1 (EP) clumps inducing inputs as FITC does, "
                          "Bauer et al. 2016" if self._alpha > 0.5 else
                          "spare inducing inputs stack up when fewer suffice")

    def _site_q(self, totals: Callable[[Tensor], tuple[Tensor, Tensor]] | None = None
                ) -> tuple[Tensor, float, Any]:
        """L = chol(Kuu), the jitter used, and the sites' whitened q(v) (docs/math.md §5), from a
        pass over all the sites or from `totals` (L ↦ their sums (A, c))."""
        L, used = cov.Kuu_cholesky(self.feature, self.kernel, self.jitter)
        stats = (pep.site_statistics(self.kernel, self.feature, self.X, L, self.tau, self.nu,
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
        X = self.X if idx is None else self.X[idx]
        return pep.marginals(self.kernel, self.feature, X, L, q, self._chunk(), self.prior_mean())

    def update_sites(self, max_sweeps: int = 200, tol: float = 1e-6,
                     batch: Tensor | None = None) -> dict[str, int]:
        """Damped parallel site sweeps (all sites, or the rows `batch`) until they stop changing;
        see `training.ep.site_sweeps`. Returns the sweeps run and updates skipped."""
        self._require_data()
        with threads_for(self.evaluation_work()):
            return schedules.site_sweeps(self, max_sweeps, tol, batch)

    def update(self, X_new: Any, y_new: Any, inducing_points: Any = None, fit: bool = True,
               **fit_options: Any) -> SGPC:
        """Streaming update (Bui, Nguyen & Turner 2017) with Power EP: a `StreamingSGPC` that
        has seen this model's data, through its posterior q(u) alone, and the new batch
        (X_new [N_new, D], labels y_new [N_new]), fitted to them unless `fit=False` (then
        only the new batch's sites are swept, at these hyperparameters); see
        `sparsegp.models.streaming_sgpc.update`."""
        streaming = cast(Any, MODELS.get("StreamingSGPC"))  # registered by models.streaming_sgpc
        return cast(SGPC, streaming.from_update(self, X_new, y_new, inducing_points, fit,
                                                **fit_options))

    fit_options = frozenset({"maxiter", "tol", "progress", "callback", "schedule",
                             "inner_maxiter", "max_sweeps", "batch_size", "epochs", "lr",
                             "sweeps_per_batch", "seed", "refresh_every"})
    _FULL = frozenset({"maxiter", "tol", "callback", "inner_maxiter", "max_sweeps",
                       "schedule"})
    _STOCHASTIC = frozenset({"batch_size", "epochs", "lr", "sweeps_per_batch", "seed",
                             "refresh_every", "schedule"})

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
                o.progress, o.refresh_every)
        return guard.interrupted_result()

    # -- persistence ----------------------------------------------------------------------
    def data_extras(self) -> dict[str, Tensor]:
        """The sites, saved with the data so that a loaded model can continue fitting."""
        return {"tau": self.tau, "nu": self.nu}

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
        for name in self.data_extras():
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

    def predict_f(self, Xnew: Any, full_cov: bool = False) -> tuple[Any, Any]:
        """Mean and variance (or covariance) of the latent f*: numpy in, numpy out; a tensor
        in, differentiable tensors out."""
        with self._predicting(Xnew) as call:
            return call.out(*call.posterior.predict_f(call.X, full_cov))

    def predict_y(self, Xnew: Any) -> tuple[Any, Any]:
        """Mean and variance of y* (for Bernoulli: p(y* = 1) and p(1 − p))."""
        with self._predicting(Xnew) as call:
            mean, var = call.posterior.predict_f(call.X)
            return call.out(*self.likelihood.predict_mean_and_var(mean, var))

    @property
    def classifies(self) -> bool:
        """True under a classification likelihood (Bernoulli, the default, or Ordinal):
        `predict` gives labels."""
        return classifies(self.likelihood)

    def predict_proba(self, Xnew: Any) -> Any:
        """P(y* = 1) [N*] under the Bernoulli likelihood (probit: Φ(m*/√(1 + v*))), the K
        class probabilities [N*, K] under `Ordinal`; classification likelihoods only."""
        if not self.classifies:
            raise TypeError(f"predict_proba needs a classification likelihood (Bernoulli or "
                            f"Ordinal); this SGPC's is "
                            f"{type(self.likelihood).__name__}: use predict_y")
        return self.predict_y(Xnew)[0]

    def predict(self, Xnew: Any) -> Any:
        """Predicted labels [N*], in the label values of the training data (Bernoulli,
        Ordinal); under another likelihood the moments of the latent f* (`predict_f`), as
        every model's."""
        if not self.classifies:
            return self.predict_f(Xnew)
        return predicted_labels(self.predict_proba(Xnew), self.classes)

    def predict_log_density(self, Xnew: Any, ynew: Any) -> Any:
        """log p(y* | data) at each test point [N*]: the log predictive probability of the
        label y* (in the training labels' convention)."""
        with self._predicting(Xnew) as call:
            mean, var = call.posterior.predict_f(call.X)
            y = as_tensor(ynew.detach() if isinstance(ynew, Tensor) else ynew, "ynew",
                          device=self.device)
            y = check_finite(y.reshape(-1), "ynew").to(PARAMETER_DTYPE)
            if y.shape[0] != mean.shape[0]:
                raise ValueError(f"ynew must have one label per row of Xnew ({mean.shape[0]}); "
                                 f"got {y.shape[0]}")
            y = self.likelihood.check_targets(y)
            return call.out(self.likelihood.predict_log_density(mean, var, y))[0]

    def _observed_distribution(self, Xnew: Any, full_cov: bool) -> Distribution:
        if not self.classifies:
            if isinstance(self.likelihood, Gaussian) and not full_cov:
                mean, var = (tensor_of(t) for t in self.predict_y(Xnew))
                return gaussian(mean, var, False, 0.0)
            raise ValueError(
                f"the predictive distribution of y* under this SGPC's "
                f"{type(self.likelihood).__name__} likelihood is not available as a torch "
                "distribution (with full_cov: not at all): use predict_y for its moments, "
                "predict_log_density for its density")
        if full_cov:
            raise ValueError("the labels' predictive has no covariance over the points")
        p = self.predict_proba(Xnew)
        return label_distribution(tensor_of(p))
