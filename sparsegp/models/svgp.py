"""Stochastic variational GPs (SVGP; Hensman et al. 2013, 2015) for any likelihood."""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import torch
from torch import Tensor, nn

from .. import conditionals
from .. import covariances as cov
from ..features.stacked import Stacked
from ..kernels.base import Kernel
from ..likelihoods import Gaussian
from ..likelihoods.base import Likelihood
from ..means import Mean
from ..objectives import svgp as objective
from ..posteriors import Posterior, SeparatePosterior, SparsePosterior
from ..runtime.chunking import auto_chunk_size
from ..runtime.config import DEFAULT_JITTER, PARAMETER_DTYPE
from ..training import natural_gradient_step
from .base import NOISE_FRACTION, Model
from .classes import MODELS
from .core import ModelCore
from .coregional import CoregionalMixin
from .inducing import InducingMixin
from .svgp_diagnostics import SVGPDiagnostics
from .svgp_predictions import SVGPPredictions
from .svgp_targets import SVGPData, SVGPOptions
from .svgp_training import SVGPTraining
from .units import TargetUnits


class SVGP(SVGPPredictions, SVGPTraining, SVGPDiagnostics, SVGPData, InducingMixin,
           CoregionalMixin, TargetUnits, Model[SVGPOptions]):
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
        super().__init__(X, y, SVGPOptions(
            kernel=kernel, likelihood=likelihood, inducing_points=inducing_points, whiten=whiten,
            num_latent=num_latent, mean=mean, jitter=jitter, chunk_size=chunk_size,
            inducing_init=inducing_init, seed=seed, mean_field=mean_field, mixing=mixing,
            standardize_X=standardize_X, standardize_y=standardize_y, dtype=dtype))

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

    def _initialise(self, options: SVGPOptions) -> None:
        self._initialise_mixing(options.mixing)
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

    def update(self, X_new: Any, y_new: Any, inducing_points: Any = None, fit: bool = True,
               **fit_options: Any) -> SVGP:
        """Streaming update, any likelihood: a `StreamingSVGP` that has seen this model's data
        through its q(u) alone, and the new batch (`sparsegp.models.streaming_svgp.update`)."""
        streaming = cast(Any, MODELS.get("StreamingSVGP"))  # registered by models.streaming
        return cast(SVGP, streaming.from_update(self, X_new, y_new, inducing_points, fit,
                                                **fit_options))

    # -- persistence ----------------------------------------------------------------------
    @classmethod
    def _restore(cls, config: dict[str, Any], state: dict[str, Tensor]) -> ModelCore:
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
