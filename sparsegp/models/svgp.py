"""Stochastic variational GPs (SVGP; Hensman et al. 2013, 2015) for any likelihood."""

from __future__ import annotations

import time
from typing import Any, cast

import numpy as np
import torch
from torch import Tensor, nn
from torch.distributions import Distribution

from .. import conditionals
from .. import covariances as cov
from ..chunking import auto_chunk_size, check_chunk_size
from ..config import DEFAULT_JITTER, PARAMETER_DTYPE
from ..diagnostics import Diagnostics, RegressionView, diagnose, warn_if_unhealthy
from ..diagnostics.latent import LatentDiagnostics, LatentView, diagnose_latent
from ..distributed import is_distributed
from ..features.stacked import Stacked
from ..kernels.base import Kernel
from ..likelihoods import Bernoulli, Gaussian, HeteroscedasticGaussian
from ..likelihoods.base import Likelihood
from ..means import Mean, Zero, as_mean
from ..objectives import svgp as objective
from ..objectives.collapsed import VFE, CollapsedProblem, collapsed_objective, titsias_upper_bound
from ..posteriors import Posterior, SeparatePosterior, SparsePosterior
from ..threads import threads_for
from ..training import FitResult, fit_lbfgsb, natural_gradient_step
from ..training.minibatch import fit_minibatch
from ..validation import (
    as_output_targets,
    as_tensor,
    check_finite,
    positive_int,
    target_scale_problems,
)
from .base import NOISE_FRACTION, Model
from .coregional import CoregionalMixin, mixing_matrix
from .fitting import FitOptions, TrainingPlan, default
from .inducing import InducingMixin, resolve_feature
from .labels import binary_classes, classifies, predicted_labels
from .predictions import Call, label_distribution
from .units import TargetUnits


class SVGP(InducingMixin, CoregionalMixin, TargetUnits, Model):
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
    posterior_needs_data = False  # q(u) and the hyperparameters are the posterior
    separate_kernels = True

    def __init__(
        self, X: Any, y: Any, kernel: Kernel | None = None, likelihood: Likelihood | None = None,
        inducing_points: Any = None, whiten: bool = True, num_latent: int | None = None, *,
        mean: Any = None, jitter: float = DEFAULT_JITTER, chunk_size: int | None = None,
        inducing_init: str = "kmeans++", seed: int = 0, standardize_X: bool = False,
        standardize_y: bool | None = None, dtype: torch.dtype | None = None,
        mean_field: bool = False, mixing: Any = None,
    ) -> None:
        super().__init__(X, y, dtype=dtype, standardize_X=standardize_X, kernel=kernel,
                         likelihood=likelihood, inducing_points=inducing_points, whiten=whiten,
                         num_latent=num_latent, mean=mean, jitter=jitter, chunk_size=chunk_size,
                         inducing_init=inducing_init, seed=seed, mean_field=mean_field,
                         mixing=mixing, standardize_y=standardize_y)

    # each model takes its own constructor arguments, passed on from __init__ by keyword
    def _configure(self, X: Tensor, *, likelihood: Likelihood | None, inducing_points: Any,  # type: ignore[override]
                   whiten: bool, num_latent: int | None, chunk_size: int | None,
                   inducing_init: str, seed: int, x_shift: Tensor, x_scale: Tensor,
                   mean_field: bool = False, mixing: Any = None, **arguments: Any
                   ) -> tuple[dict[str, Any], dict[str, Any]]:
        likelihood = Gaussian() if likelihood is None else likelihood
        if not isinstance(likelihood, Likelihood):
            raise TypeError(f"likelihood must be a sparsegp likelihood; got {type(likelihood).__name__}")
        C = likelihood.num_latent if num_latent is None else positive_int(num_latent, "num_latent")
        if likelihood.num_latent > 1 and C != likelihood.num_latent:
            raise ValueError(f"num_latent must be {likelihood.num_latent} for this likelihood; got {C}")
        config, parts = super()._configure(X, x_shift=x_shift, x_scale=x_scale, **arguments)
        parts["feature"] = resolve_feature(inducing_points, parts["kernel"], X, x_shift, x_scale,
                                           inducing_init, seed)
        parts["likelihood"] = likelihood
        if mean_field and not isinstance(parts["feature"], Stacked):
            raise ValueError("mean_field=True factorises q(u) over the inducing sets of Stacked "
                             "features (a sum of kernels with one feature per part); got "
                             f"{type(parts['feature']).__name__}")
        config.update(whiten=bool(whiten), num_latent=C, chunk_size=check_chunk_size(chunk_size),
                      mean_field=bool(mean_field))
        return config, parts

    def _prepare_targets(self, y: Any, n: int, device: torch.device, parts: dict[str, Any], *,
                         mixing: Any = None, num_latent: int | None = None, mean: Any = None,
                         standardize_y: bool | None = None, **arguments: Any
                         ) -> tuple[Tensor, dict[str, Tensor], dict[str, Any]]:
        standardize = standardizes_y(parts["likelihood"], standardize_y)
        targets, extra, config = self._checked_targets(y, n, device, parts, mixing, num_latent,
                                                       mean)
        if not isinstance(parts["likelihood"], Gaussian):  # labels, counts: y as given
            return targets, {**extra, "y_shift": torch.zeros((), dtype=PARAMETER_DTYPE),
                             "y_scale": torch.ones((), dtype=PARAMETER_DTYPE)}, config
        units = self._target_units(targets, standardize, mean=mean)  # as GPModel's
        return self._in_target_units(targets, units), {**extra, **units}, config

    def _checked_targets(self, y: Any, n: int, device: torch.device, parts: dict[str, Any],
                         mixing: Any, num_latent: int | None, mean: Any
                         ) -> tuple[Tensor, dict[str, Tensor], dict[str, Any]]:
        """The targets as given, checked for the likelihood (labels as codes)."""
        t = as_tensor(y, "y", device=device)
        W = None if mixing is None else mixing_matrix(mixing)
        if (t.dim() == 2 and t.shape[1] > 1) or W is not None:
            return _output_targets(t, n, parts["likelihood"], W, num_latent, mean)
        if t.dim() == 2 and t.shape[1] == 1:
            t = t[:, 0]
        if t.dim() != 1 or t.shape[0] != n:
            raise ValueError(f"y must have one entry per row of X ({n}); got shape {tuple(t.shape)}")
        likelihood = parts["likelihood"]
        if num_latent is not None and int(num_latent) != likelihood.num_latent:
            raise ValueError(f"num_latent must be {likelihood.num_latent} for one output and "
                             f"{type(likelihood).__name__} (the others would go unused); got "
                             f"{num_latent}: several outputs take y [N, P], or a mixing matrix")
        if isinstance(likelihood, Gaussian) and likelihood.value("variance").numel() > 1:
            raise ValueError(f"the Gaussian likelihood has {likelihood.value('variance').numel()} "
                             "variances (one per output) but y has one output: give one number")
        labels = likelihood.check_targets(check_finite(t, "y").to(PARAMETER_DTYPE))
        if isinstance(likelihood, Bernoulli):
            parts["likelihood"].require_both_classes(labels)
            return labels, {}, {"classes": binary_classes(y, t)}
        return labels, {}, {}

    def _target_scale_problems(self, y: Tensor, buffers: dict[str, Tensor], *, mean: Any = None,
                               likelihood: Likelihood | None = None,
                               standardize_y: bool | None = None, **arguments: Any
                               ) -> list[str]:
        """Badly scaled real-valued targets (Gaussian likelihoods, homo- or heteroscedastic;
        labels and counts are what they are; standardised targets are well scaled)."""
        likelihood = Gaussian() if likelihood is None else likelihood
        if (not isinstance(likelihood, (Gaussian, HeteroscedasticGaussian)) or y.dim() != 1
                or standardizes_y(likelihood, standardize_y)):
            return []
        return target_scale_problems(y, isinstance(as_mean(mean), Zero),
                                     standardize=isinstance(likelihood, Gaussian))

    def _build(self, config: dict[str, Any], parts: dict[str, Any]) -> None:
        super()._build(config, parts)
        # y_shift, y_scale as GPModel's (0 and 1, y as given, for other likelihoods)
        self._declare_target_units(config.get("num_outputs"))
        self.likelihood = parts["likelihood"].to(dtype=PARAMETER_DTYPE)
        self.feature = parts["feature"]
        self.whiten, self.chunk_size = bool(config["whiten"]), config["chunk_size"]
        self.mean_field = bool(config.get("mean_field", False))
        M, C = self.feature.num_inducing, int(config["num_latent"])
        self.q_mu = nn.Parameter(torch.zeros(M, C, dtype=PARAMETER_DTYPE))
        self.q_sqrt = nn.Parameter(torch.eye(M, dtype=PARAMETER_DTYPE).expand(C, M, M).clone())
        self._declare_mixing(config.get("mixing"))  # W [P, L] of the LMC, or None
        pairs = cov.separate_pairs(self.feature, self.kernel)
        if pairs is not None:
            if len(pairs) != C:
                raise ValueError(f"kernels.Separate has {len(pairs)} kernels for {C} latent "
                                 "functions: give one per latent function (output)")
            blocks = [f.num_inducing for f, _ in pairs]
            if not self.whiten:
                raise ValueError("kernels.Separate in SVGP needs whiten=True")
            if len(set(blocks)) > 1:
                raise ValueError("kernels.Separate in SVGP needs the same number of inducing "
                                 f"variables for every latent function; got {blocks} (SGPR "
                                 "takes different numbers)")

    def _initialise(self, mixing: Any = None, **arguments: Any) -> None:
        self._initialise_mixing(mixing)
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
                sv = self._target_signal_variance()
                self.likelihood.initialise_from_data(NOISE_FRACTION * sv)
        self.kernel.initialise_from_data(self.X, sv)
        if not self.whiten:  # start at the prior, S = Kuu
            with torch.no_grad():
                self.q_sqrt.copy_(self._cholesky_kuu().expand_as(self.q_sqrt))

    def _after_feature_change(self) -> None:
        """q(u) for M + K inducing variables: the old q on the first M, the prior's conditional
        on the new ones (exact in whitened coordinates: chol of the grown Kuu starts with the
        old factor)."""
        M_old, M = self.q_mu.shape[0], self.feature.num_inducing
        with torch.no_grad():
            L = self._cholesky_kuu()
            q = conditionals.from_parameters(L[:M_old, :M_old], self.q_mu, self.q_sqrt, self.whiten)
            C = q.mean.shape[1]
            mean = torch.cat([q.mean, q.mean.new_zeros(M - M_old, C)])
            root = torch.eye(M, dtype=q.root.dtype, device=q.root.device).repeat(C, 1, 1)
            root[:, :M_old, :M_old] = q.root
            if not self.whiten:
                mean, root = L @ mean, L @ root
        self.q_mu = nn.Parameter(mean, requires_grad=self.q_mu.requires_grad)
        self.q_sqrt = nn.Parameter(root, requires_grad=self.q_sqrt.requires_grad)

    @property
    def num_latent(self) -> int:
        return self.q_mu.shape[1]

    def _cholesky_kuu(self) -> Tensor:
        return cov.Kuu_cholesky(self.feature, self.kernel, self.jitter)[0]

    def _chunk(self) -> int:
        width = cov.width(self.feature, self.kernel) + self.num_inducing * self.num_latent
        return self.chunk_size or auto_chunk_size(width, self.X.element_size(), device=self.X.device)

    # -- the bound ------------------------------------------------------------------------
    def elbo(self, X: Tensor | None = None, y: Tensor | None = None, q_mu: Tensor | None = None,
             q_sqrt: Tensor | None = None) -> Tensor:
        """The ELBO (total, not per datum): on all data, or an unbiased estimate from the
        minibatch (X, y) in internal units. q(u) may be overridden (natural gradients). In the
        internal units of y (`log_marginal_likelihood` gives it in the units of y)."""
        X, y = (self.X, self.y) if X is None else (X, cast(Tensor, y))  # a minibatch comes with its y
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
                                  for m in cast(Stacked, self.feature).blocks))  # mean_field: Stacked
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
        return _OnOneLatent(mean, column, self.num_latent)

    def forward(self, X: Tensor, y: Tensor) -> Tensor:
        """Minus the minibatch ELBO estimate (and log priors): what DDP and Adam minimise
        (internal units, as `elbo`; `fit` reports it in the units of y)."""
        return -(self.elbo(X, y) + self.log_prior())

    def log_marginal_likelihood(self) -> float:
        """The ELBO on all the data (a lower bound on log p(y)), in the units of y."""
        self._require_data()
        with torch.no_grad():
            return float(self.elbo()) + self._objective_offset()

    @property
    def noise_variance(self) -> float | np.ndarray:
        """The Gaussian likelihood's variance σ² in the units of y (one number, or one per
        output); `likelihood.variance` is that of the internal, standardised targets."""
        if not isinstance(self.likelihood, Gaussian):
            raise AttributeError(f"noise_variance is the Gaussian likelihood's; this SVGP's is "
                                 f"{type(self.likelihood).__name__}")
        return self._variance_in_target_units(self.likelihood.variance)

    # -- is the approximation good? (Gaussian likelihood) ---------------------------------
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
            raise ValueError(f"the collapsed bound, its upper bound and the diagnostics take one "
                             f"output; this SVGP has {self.num_outputs}"
                             + (" and a mixing matrix" if self.mixing_matrix is not None else "")
                             + " (fit a single-output model per column to diagnose it)")
        return self._bound_problem()

    def _bound_problem(self) -> CollapsedProblem:
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
        return RegressionView(type(self).__name__, self.kernel, self.X, residual, noise,
                              self.jitter, self._objective_offset(),
                              self._variance_in_target_units(float(noise)), self.x_shift,
                              self.x_scale,
                              problem._replace(y=residual, mean=None),
                              self.shards_data and is_distributed(), self.feature_names,
                              objective=elbo,
                              approximation="ELBO, mean-field q(u)" if self.mean_field else "ELBO",
                              objective_remedy=(
                                  "a mean-field q(u) cannot reach it: the gap includes the cost "
                                  "of the factorisation; train longer" if self.mean_field else
                                  "train longer; one natural-gradient step of size 1 on all "
                                  "the data reaches it: model.natural_gradient_step(1.0)"))

    def diagnostics(self, **kwargs: Any) -> Diagnostics | LatentDiagnostics:
        """Is the approximation good? With a Gaussian likelihood and one output: the ELBO
        against the VFE bound (its maximum over q(u)) and the upper bound, with the noise and
        inducing-input checks of `sparsegp.diagnostics.diagnose` (`kwargs`: its thresholds).
        Otherwise (no upper bound exists): the ELBO and the inducing-input checks
        (`sparsegp.diagnostics.diagnose_latent`)."""
        if (isinstance(self.likelihood, Gaussian) and self.num_outputs == 1
                and self.mixing_matrix is None):
            return diagnose(self, **kwargs)
        self._require_data()
        with torch.no_grad():
            elbo = float(self.elbo()) + self._objective_offset()  # the units of y
        view = LatentView(type(self).__name__, f"ELBO, {type(self.likelihood).__name__}",
                          elbo, "ELBO, a lower bound on log p(y)", self.feature, self.kernel,
                          self.X, "a variational fit stacks spare inducing inputs on top of "
                          "each other when fewer suffice")
        return diagnose_latent(view, **kwargs)

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

    fit_options = frozenset({"maxiter", "progress", "callback", "diagnose", "batch_size",
                             "epochs", "lr", "natgrad", "gamma", "seed", "data"})

    def training_plan(self, options: FitOptions) -> TrainingPlan:
        """Every option has a default that works for a few thousand points.

        Gaussian likelihood, `batch_size=None` and no `data`: full-batch L-BFGS-B (`maxiter`,
        default 1000) on the hyperparameters with q(u) at its optimum throughout — the
        collapsed bound (Titsias 2009), which is the ELBO maximised over q(u) — then one
        natural-gradient step of size 1 puts q(u) at that optimum; with `diagnose` (default)
        and one output the fitted model is then checked as `SGPR.fit` checks it
        (`diagnostics()`; one `sparsegp.ApproximationWarning` lists what tripped, never an
        error). A minibatch fit is not checked (the checks cost several passes over the
        data): call `diagnostics()`. Otherwise minibatches of `batch_size` (default
        min(N, 256)) from (X, y) or from `data` (a DataLoader of (X, y) batches in the units
        of X) for `epochs` (default: about 2,000 steps, drawn with `seed`, default 0), each
        step an Adam step (`lr`, default 0.01) on the hyperparameters and, with `natgrad`
        (default True), a natural-gradient step of size `gamma` (default 0.1) on q(u) — or
        Adam on q(u) too without `natgrad`. Options of the way not taken give a warning that
        names them. Ctrl-C stops at the last completed step."""
        why = self._why_minibatch(options.batch_size, options.data)
        if why is None:
            return TrainingPlan("full-batch L-BFGS-B (`maxiter`)",
                                frozenset({"maxiter", "callback", "diagnose", "natgrad"}),
                                self._fit_collapsed,
                                "minibatch training (batch_size or data given)")
        return TrainingPlan(f"minibatch training because of {why} (`epochs` sets its length)",
                            self.fit_options - {"maxiter", "diagnose"}, self._fit_minibatch,
                            "the full-batch L-BFGS-B fit (a Gaussian likelihood without "
                            "batch_size or data)")

    def _fit_collapsed(self, options: FitOptions) -> FitResult:
        start = time.perf_counter()
        # q(u) frozen (in part): the ELBO at that q(u), not the bound at the optimal one
        q_free = self.q_mu.requires_grad and self.q_sqrt.requires_grad
        with threads_for(self.evaluation_work()):
            res = fit_lbfgsb(_CollapsedBound(self) if q_free else self,
                             maxiter=default(options.maxiter, 1000),
                             progress=options.progress, callback=options.callback)
        if q_free:
            self.natural_gradient_step(1.0)  # the optimal q(u) at the fitted hyperparameters
            res.objective = self.log_marginal_likelihood() + float(self.log_prior().detach())
        res.seconds = time.perf_counter() - start
        if options.diagnose is not False and not res.interrupted and self.num_outputs == 1:
            warn_if_unhealthy(self, stacklevel=4)  # the caller of fit()
        return res

    def _fit_minibatch(self, options: FitOptions) -> FitResult:
        natgrad = default(options.natgrad, True) and not self.mean_field
        B = float(min(self.num_data, options.batch_size or 256))
        M = float(self.num_inducing)
        cost = getattr(self.kernel, "evaluation_cost", 1)
        # the minibatch bounds are of the internal targets: reported in the units of y
        offset = self._objective_offset()
        callback = options.callback
        if offset and callable(callback):
            callback = _shifted_callback(callback, offset)
        with threads_for((B * M * M * self.num_latent + M**3) * cost):
            res = fit_minibatch(self, options.batch_size, options.epochs, options.lr, natgrad,
                                options.gamma, options.data, options.progress, options.seed,
                                callback)
        if offset:
            res.objective += offset
            res.history = [h + offset for h in res.history]
        return res

    def _why_minibatch(self, batch_size: int | None, data: Any) -> str | None:
        """Why `fit` trains by minibatches (None: it fits the collapsed bound by L-BFGS-B)."""
        reasons = [(batch_size is not None, "batch_size given"), (data is not None, "data given"),
                   (not isinstance(self.likelihood, Gaussian), "a non-Gaussian likelihood"),
                   (is_distributed(), "data sharded over processes"),
                   (self.mean_field, "mean_field=True"),
                   (self.mixing_matrix is not None, "a mixing matrix")]
        return next((why for applies, why in reasons if applies), None)

    def internal_batch(self, Xb: Any, yb: Any) -> tuple[Tensor, Tensor]:
        """A batch (X, y) in the user's units as the objective takes it (internal units)."""
        return self._internal_inputs(Xb, "a batch of X"), self._internal_targets(yb)

    def _internal_targets(self, yb: Any, name: str = "a batch of y", rows: int | None = None
                          ) -> Tensor:
        """Targets in the units of y (checked as `_batch_targets`) in the internal units the
        objective takes: (y − y_shift)/y_scale under a Gaussian likelihood, labels as they
        are."""
        t = self._batch_targets(yb, name, rows)
        if not isinstance(self.likelihood, Gaussian):
            return t
        return self._in_target_units(t, {"y_shift": self.y_shift, "y_scale": self.y_scale})

    def _batch_targets(self, yb: Any, name: str = "a batch of y", rows: int | None = None
                       ) -> Tensor:
        """Targets checked like y (for `rows` inputs, when given): finite for one output, NaN
        marking missing entries of several."""
        t = as_tensor(yb, name, dtype=self.dtype, device=self.device)
        if self._config.get("num_outputs"):
            n = t.shape[0] if rows is None else rows
            return _checked_outputs(t.reshape(t.shape[0], -1) if t.dim() else t, n,
                                    self.num_outputs, name)
        t = t.reshape(-1)
        if rows is not None and t.shape[0] != rows:
            raise ValueError(f"{name} must have one entry per row of Xnew ({rows}); got "
                             f"{t.shape[0]}")
        return self.likelihood.check_targets(check_finite(t, name).to(PARAMETER_DTYPE))

    # -- persistence ----------------------------------------------------------------------
    @classmethod
    def _restore(cls, config: dict[str, Any], state: dict[str, Tensor]) -> Model:
        # files saved before SVGP had the units of y hold y as given: shift 0, scale 1
        P = config.get("num_outputs")
        state.setdefault("y_shift", torch.zeros(() if P is None else (P,), dtype=PARAMETER_DTYPE))
        state.setdefault("y_scale", torch.ones((), dtype=PARAMETER_DTYPE))
        return super()._restore(config, state)

    def _restore_posterior(self, saved: dict[str, Any]) -> Posterior:
        pairs = cov.separate_pairs(self.feature, self.kernel)
        if pairs is not None:
            return SeparatePosterior.from_state(pairs, saved, self.prior_mean())
        return SparsePosterior.from_state(self.kernel, self.feature, saved, self.prior_mean())

    # -- prediction -----------------------------------------------------------------------
    def _build_posterior(self) -> Posterior:
        L = self._cholesky_kuu()
        q = conditionals.from_parameters(L, self.q_mu, self._root(self.q_sqrt), self.whiten)
        pairs = cov.separate_pairs(self.feature, self.kernel)
        if pairs is not None:
            zero = torch.zeros((), dtype=L.dtype, device=L.device)
            parts = [SparsePosterior(k, f, L[c], q.column(c), zero, self.jitter)
                     for c, (f, k) in enumerate(pairs)]
            return SeparatePosterior(parts, zero, self.prior_mean())
        return SparsePosterior(self.kernel, self.feature, L, q,
                               torch.zeros((), dtype=L.dtype, device=L.device), self.jitter,
                               self.prior_mean())

    def _latent(self, call: Call, full_cov: bool = False) -> tuple[Tensor, Tensor]:
        """Mean and variance of the latent functions, always [N*, C] (or [C, N*, N*])."""
        mean, var = call.posterior.predict_f(call.X, full_cov)
        if self.num_latent == 1:
            mean, var = mean[:, None], (var[None] if full_cov else var[:, None])
        return mean, var

    def _functions(self, call: Call, full_cov: bool = False, full_output_cov: bool = False
                   ) -> tuple[Tensor, Tensor]:
        """Mean [N*, C] of the functions the likelihood sees (the latent functions, or the P
        outputs W g of the LMC) and their variances [N*, C], covariances over the points
        [C, N*, N*] (`full_cov`) or over the outputs at each point [N*, C, C]
        (`full_output_cov`)."""
        if full_cov and full_output_cov:
            raise ValueError("full_cov (over the points) and full_output_cov (over the outputs "
                             "at each point) cannot both be asked for")
        mean, var = self._latent(call, full_cov)
        W = None if self.mixing_matrix is None else self.mixing_matrix.to(mean.dtype)
        if full_output_cov:
            Wt = torch.eye(self.num_latent, dtype=mean.dtype, device=mean.device) if W is None else W
            return objective.mix(mean, var, W)[0], torch.einsum("pl,nl,ql->npq", Wt, var, Wt)
        if W is None:
            return mean, var
        if full_cov:
            return mean @ W.mT, torch.einsum("pl,lnm->pnm", W * W, var)
        return objective.mix(mean, var, W)

    def predict_f(self, Xnew: Any, full_cov: bool = False, full_output_cov: bool = False
                  ) -> tuple[Any, Any]:
        """Mean and variance of the latent functions (the outputs of the LMC with `mixing`):
        [N*] for one, [N*, C] for several; `full_cov` gives covariances over the points
        ([N*, N*], or [C, N*, N*]), `full_output_cov` over the functions at each point
        [N*, C, C]. Numpy in, numpy out; a tensor in, differentiable tensors out."""
        with self._predicting(Xnew) as call:
            mean, var = self._in_units_of_y(*self._functions(call, full_cov, full_output_cov))
            if mean.shape[1] == 1 and not full_output_cov:
                mean, var = mean[:, 0], (var[0] if full_cov else var[:, 0])
            return call.out(mean, var)

    def _in_units_of_y(self, mean: Tensor, var: Tensor) -> tuple[Tensor, Tensor]:
        """Moments of the functions [N*, C] (and variances or covariances of any layout) from
        the internal units to those of y (the identity unless y is standardised)."""
        s = self.y_scale.to(mean.dtype)
        return mean * s + self.y_shift.to(mean.dtype), var * (s * s)

    def _likelihood_moments(self, call: Call) -> tuple[Tensor, Tensor]:
        mean, var = self._functions(call)
        if self.likelihood.num_latent == 1 and self.num_outputs == 1:
            mean, var = mean[:, 0], var[:, 0]
        return mean, var

    def predict_y(self, Xnew: Any, full_cov: bool = False, full_output_cov: bool = False
                  ) -> tuple[Any, Any]:
        """Mean and variance of y* under the likelihood, shaped as `predict_f`'s; with a
        Gaussian likelihood also the covariance of y* over the points (`full_cov`) or over
        the outputs at each point (`full_output_cov`): f*'s plus the noise variance."""
        if (full_cov or full_output_cov) and not isinstance(self.likelihood, Gaussian):
            raise ValueError("full_cov and full_output_cov of y* need a Gaussian likelihood; this "
                             f"SVGP's is {type(self.likelihood).__name__} (predict_f gives the "
                             "covariances of f*)")
        with self._predicting(Xnew) as call:
            if not (full_cov or full_output_cov):
                return call.out(*self._in_units_of_y(*self.likelihood.predict_mean_and_var(
                    *self._likelihood_moments(call))))
            mean, cov = self._functions(call, full_cov, full_output_cov)
            noise = self.likelihood.value("variance").to(cov.dtype).expand(mean.shape[1])
            if full_cov:  # [C, N*, N*]
                cov = cov + noise[:, None, None] * torch.eye(cov.shape[-1], dtype=cov.dtype,
                                                             device=cov.device)
            else:  # [N*, C, C]
                cov = cov + torch.diag_embed(noise)
            mean, cov = self._in_units_of_y(mean, cov)
            if mean.shape[1] == 1 and not full_output_cov:
                mean, cov = mean[:, 0], cov[0]
            return call.out(mean, cov)

    def predict(self, Xnew: Any, full_cov: bool = False, include_noise: bool = False,
                full_output_cov: bool = False) -> Any:
        """Under a classification likelihood (Bernoulli, MultiClass): the predicted labels
        [N*] (as `SGPC.predict`). Otherwise as `SGPR.predict`: `predict_f` (latent f*) by
        default, `predict_y` (y* under the likelihood) with `include_noise=True`."""
        if self.classifies:
            if full_cov or include_noise or full_output_cov:
                raise ValueError("predict gives labels under a classification likelihood and "
                                 "takes no full_cov, include_noise or full_output_cov (use "
                                 "predict_f / predict_y for moments)")
            return predicted_labels(self.predict_proba(Xnew), self._config.get("classes"))
        if include_noise:
            return self.predict_y(Xnew, full_cov, full_output_cov)
        return self.predict_f(Xnew, full_cov, full_output_cov)

    @property
    def classifies(self) -> bool:
        """True under a classification likelihood (Bernoulli, MultiClass)."""
        return classifies(self.likelihood)

    def predict_proba(self, Xnew: Any) -> Any:
        """Class probabilities: P(y* = 1) [N*] for Bernoulli, [N*, C] for several classes."""
        if not self.classifies:
            raise TypeError(f"predict_proba needs a classification likelihood (Bernoulli, "
                            f"MultiClass); this SVGP's is {type(self.likelihood).__name__}: "
                            "use predict_y")
        return self.predict_y(Xnew)[0]

    def _observed_distribution(self, Xnew: Any, full_cov: bool) -> Distribution:
        if self.classifies:
            if full_cov:
                raise ValueError("the labels' predictive has no covariance over the points")
            p = self.predict_proba(Xnew)
            return label_distribution(p if isinstance(p, Tensor) else torch.from_numpy(p))
        if not isinstance(self.likelihood, Gaussian):
            raise NotImplementedError(
                f"the predictive distribution of y* under {type(self.likelihood).__name__} is "
                "not available as a torch distribution: use predict_y for its moments, "
                "predict_log_density for its density")
        return super()._observed_distribution(Xnew, full_cov)

    def predict_log_density(self, Xnew: Any, ynew: Any) -> Any:
        """log p(y* | data) at each test point [N*] (e.g. for the test NLPD), in the units of
        y; with P outputs one per output [N*, P] (the marginal of each; NaN where y* is
        missing)."""
        with self._predicting(Xnew) as call:
            mean, var = self._likelihood_moments(call)
            y = self._internal_targets(ynew.detach().to(self.dtype) if isinstance(ynew, Tensor)
                                       else ynew, "ynew", rows=mean.shape[0])
            log_density = self.likelihood.predict_log_density(mean, var, y)
            if isinstance(self.likelihood, Gaussian):  # the density of y, not of (y − b)/s
                log_density = log_density - torch.log(self.y_scale).to(log_density.dtype)
            return call.out(log_density)[0]


class _OnOneLatent(Mean):
    """m(x) on latent function `column` of C, zero on the others: X [N, D] -> [N, C]."""

    def __init__(self, mean: Mean, column: int, num_latent: int) -> None:
        super().__init__()
        self.mean, self.column, self.num_latent = mean, column, num_latent

    def config(self) -> dict[str, Any]:
        return {"type": type(self).__name__, "args": {
            "mean": self.mean.config(), "column": self.column, "num_latent": self.num_latent}}

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> _OnOneLatent:
        args = cfg["args"]
        return cls(Mean.registry.build(args["mean"]), args["column"], args["num_latent"])

    def forward(self, X: Tensor) -> Tensor:
        m = self.mean(X)
        out = m.new_zeros(X.shape[0], self.num_latent)
        out[:, self.column] = m
        return out


class _CollapsedBound:
    """The SVGP's hyperparameters under the collapsed bound max_q ELBO (Gaussian likelihood)."""

    def __init__(self, model: SVGP) -> None:
        self.model = model
        self.display_name = type(model).__name__  # what fit's messages name
        self._params = [p for n, p in model.named_parameters() if not n.startswith("q_")]

    def parameters(self) -> list[nn.Parameter]:
        return self._params

    def training_loss(self) -> Tensor:
        m = self.model
        problem = m._bound_problem()
        noise = problem.noise
        if noise.dim() == 0:
            bound = collapsed_objective(problem)
        else:  # one noise per output: the outputs' bounds one by one, each on its points
            observed = ~torch.isnan(m.y)
            pairs = cov.separate_pairs(m.feature, m.kernel)
            bound = cast(Tensor, sum(collapsed_objective(problem._replace(
                X=m.X[observed[:, p]], y=m.y[observed[:, p], p], noise=noise[p],
                feature=m.feature if pairs is None else pairs[p][0],
                kernel=m.kernel if pairs is None else pairs[p][1]))
                for p in range(m.y.shape[1])))
        return -(bound + m._objective_offset() + m.log_prior())

    def summary(self) -> str:
        return self.model.summary()


def _shifted_callback(callback: Any, offset: float) -> Any:
    """`callback(epoch, objective)` given the objective plus `offset` (the units of y)."""
    def shifted(epoch: int, objective: float) -> Any:
        return callback(epoch, objective + offset)
    return shifted


def standardizes_y(likelihood: Likelihood, standardize_y: bool | None) -> bool:
    """Whether an SVGP with `likelihood` standardises y: `standardize_y`, whose default (None)
    is True for the Gaussian likelihood. Other likelihoods take y as given and refuse True."""
    if standardize_y is not None and not isinstance(standardize_y, bool):
        raise TypeError(f"standardize_y must be True, False or None; got {standardize_y!r}")
    if not isinstance(likelihood, Gaussian):
        if standardize_y:
            raise ValueError(f"standardize_y=True applies to the Gaussian likelihood; "
                             f"{type(likelihood).__name__} takes y as it is (labels, counts, or "
                             "a noise model of its own units): leave standardize_y unset, or "
                             "rescale y yourself")
        return False
    return True if standardize_y is None else standardize_y


def _checked_outputs(t: Tensor, n: int, P: int, name: str) -> Tensor:
    """Targets [n, P] of P outputs with NaN marking a missing one (±inf refused)."""
    if t.dim() != 2 or tuple(t.shape) != (n, P):
        raise ValueError(f"{name} must have shape [{n}, {P}] (one column per output); got "
                         f"{tuple(t.shape)}")
    if bool(torch.isinf(t).any()):
        raise ValueError(f"{name} contains ±inf (NaN marks a missing output)")
    return t.to(PARAMETER_DTYPE)


def _output_targets(t: Tensor, n: int, likelihood: Likelihood, W: Tensor | None,
                    num_latent: int | None, mean: Any
                    ) -> tuple[Tensor, dict[str, Tensor], dict[str, Any]]:
    """Targets of P outputs (Gaussian likelihood; NaN: missing) and the config they imply:
    P latent functions, or the L of the mixing matrix W [P, L]."""
    if not isinstance(likelihood, Gaussian):
        raise ValueError("several output columns (or a mixing matrix) need the Gaussian "
                         f"likelihood; got {type(likelihood).__name__}")
    if not isinstance(as_mean(mean), Zero):
        raise ValueError("a prior mean takes one output: with several output columns or a "
                         "mixing matrix leave mean=None (centre each column of y instead)")
    y = as_output_targets(t, n, "y")
    P = 1 if y.dim() == 1 else y.shape[1]
    y = _checked_outputs(y.reshape(n, P), n, P, "y")
    noise = likelihood.value("variance")
    if noise.dim() > 1 or (noise.dim() == 1 and noise.shape[0] != P):
        raise ValueError(f"the Gaussian likelihood's variance must be one number or one per "
                         f"output ({P}); got shape {tuple(noise.shape)}")
    C = P if W is None else mixing_matrix(W, P).shape[1]
    if num_latent is not None and int(num_latent) != C:
        raise ValueError(f"num_latent must be {C} here (" + ("the columns of mixing" if W is not None
                         else "one latent function per output") + f"); got {num_latent}")
    config: dict[str, Any] = {"num_outputs": P, "num_latent": C,
                              "mixing": None if W is None else list(W.shape)}
    return y, {}, config
