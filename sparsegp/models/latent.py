"""What the random-input models (the Bayesian GP-LVM and the GPSSM) share: outputs Y, latent
inputs with a Gaussian q per row, a kernel and inducing points in the latent space, a bound
with q(u) collapsed (L-BFGS-B) or explicit (minibatches), the posterior from the optimal q(u),
and persistence."""

from __future__ import annotations

import numbers
import warnings
from abc import abstractmethod
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from ..covariances import Kuu_cholesky
from ..features.inducing_points import InducingPoints
from ..features.initialisation import initial_inducing_inputs
from ..kernels.base import Kernel
from ..kernels.separate import Separate
from ..kernels.stationary import SquaredExponential
from ..objectives.gplvm import PsiSums, optimal_q
from ..parameters import as_user_array
from ..posteriors import SparsePosterior
from ..runtime.config import NOISE_FLOOR, PARAMETER_DTYPE, POSITIVE_FLOOR
from ..runtime.threads import threads_for
from ..training import FitResult, fit_lbfgsb
from ..training.lbfgs import MAXITER
from ..training.minibatch import fit_minibatch
from ..validation import (
    GOOD_SPREAD,
    ScaleWarning,
    as_tensor,
    check_finite,
    positive_int,
    seeded_generator,
)
from .core import ModelCore
from .fitting import FitOptions, TrainingPlan, default, stall_rule
from .predictions import gaussian_log_density, prediction_inputs
from .state import StateKey


def outputs(Y: Any, name: str = "Y", min_rows: int = 2) -> Tensor:
    """Y as a finite float64 [N, D] tensor (a 1-D array is one output column)."""
    t = check_finite(as_tensor(Y, name), name)
    if t.dim() == 1:
        t = t[:, None]
    if t.dim() != 2 or t.shape[0] < min_rows or t.shape[1] < 1:
        raise ValueError(f"{name} must be a 2-D array [N, D] with N ≥ {min_rows} rows; got "
                         f"shape {tuple(t.shape)}")
    return t.to(PARAMETER_DTYPE)


def pca_latents(Y: Tensor, Q: int, seed: int = 0) -> Tensor:
    """The first Q principal-component scores of the centred Y, each scaled to unit variance
    (columns beyond rank(Y) filled with seeded N(0, 0.01²) noise). [N, Q]."""
    Yc = Y - Y.mean(0)
    U, s, _ = torch.linalg.svd(Yc, full_matrices=False)
    k = min(Q, int((s > s[0] * 1e-10).sum()) if s[0] > 0 else 0)
    X = torch.empty(Y.shape[0], Q, dtype=Y.dtype, device=Y.device)
    X[:, :k] = U[:, :k] * (Y.shape[0] - 1) ** 0.5  # unit variance: std of U's columns is 1/√(N−1)
    g = seeded_generator(seed)
    X[:, k:] = 0.01 * torch.randn(Y.shape[0], Q - k, generator=g, dtype=Y.dtype).to(Y.device)
    return X


def checked_kernel(kernel: Any, Q: int) -> Kernel:
    """The kernel, by default a squared exponential with one lengthscale per latent dimension."""
    if kernel is None:
        return SquaredExponential(lengthscale=torch.ones(Q))
    if not isinstance(kernel, Kernel):
        raise TypeError(f"kernel must be a sparsegp kernel; got {type(kernel).__name__}")
    if isinstance(kernel, Separate):
        raise TypeError("the random-input models take one kernel: kernels.Separate (one kernel "
                        "per output) is for SGPR and SVGP with y [N, P]")
    return kernel


def inducing_inputs(value: Any, latent: Tensor, Q: int, default: int, seed: int, rows: str
                    ) -> InducingPoints:
    """Inducing points in a latent space: given [M, Q], or M (default `default`) chosen from
    the starting latent points [N, Q] by seeded k-means++ (`rows` names them in errors)."""
    if isinstance(value, Tensor | np.ndarray | list):
        feature = InducingPoints(value)
        if feature.input_dim != Q:
            raise ValueError(f"inducing_points must have {Q} columns (the latent dimension); "
                             f"got {feature.input_dim}")
        return feature
    if value is not None and not isinstance(value, numbers.Integral):
        raise TypeError(f"inducing_points must be an int M or an array [M, {Q}] of inducing "
                        f"inputs in the latent space (inter-domain features are not supported "
                        f"here); got {type(value).__name__}")
    M = positive_int(default if value is None else value, "inducing_points")
    # the default is capped at the distinct starting points (repeated rows of Y share one)
    return InducingPoints(initial_inducing_inputs(latent, M, seed=seed, at_most=value is None,
                                                  rows=rows))


def check_output_scale(signal: float, default_noise: bool, model: str) -> None:
    """A ScaleWarning when Y's columns vary far from unit scale (the latent points' unit prior
    and the floors of the variances then fit badly), a ValueError when the default starting
    noise variance, signal/20, would be below its floor. `signal`: Y's mean column variance;
    `default_noise`: the noise starts from the data."""
    lo, hi = GOOD_SPREAD
    spread = signal ** 0.5
    if lo <= spread <= hi:
        return
    advice = f"the columns of Y have spread {spread:.3g}, far from 1: rescale Y (e.g. Y / Y.std(0))"
    if signal <= POSITIVE_FLOOR or (default_noise and signal / 20.0 <= NOISE_FLOOR):
        raise ValueError(f"{advice}; the starting variances taken from it would be below their "
                         f"floor {NOISE_FLOOR}")
    warnings.warn(f"{model}: badly scaled data: {advice}", ScaleWarning, stacklevel=3)


class LatentInputModel(ModelCore):
    """Base of the random-input models; subclasses give the bound and the optimal q(u)."""

    saves_data_by_default = True  # Y is what the latent points explain: keep it

    kernel: Kernel
    feature: InducingPoints

    def _build_common(self, config: dict[str, Any], parts: dict[str, Any]) -> None:
        self._config = dict(config)
        self.kernel = parts["kernel"].to(dtype=PARAMETER_DTYPE)
        self.feature = parts["feature"].to(dtype=PARAMETER_DTYPE)
        self.register_buffer("X", None, persistent=False)  # no observed inputs
        self.register_buffer("y", None, persistent=False)
        self._cache: tuple[SparsePosterior, StateKey] | None = None
        self.metadata: dict[str, Any] = {}

    # -- what users read ------------------------------------------------------------------
    @property
    def inducing_points(self) -> np.ndarray:
        """Z [M, Q]: the inducing inputs in the latent space."""
        return as_user_array(self.feature.Z)

    @property
    def num_inducing(self) -> int:
        return self.feature.num_inducing

    def _out(self, t: Tensor) -> np.ndarray:
        """A tensor as a numpy array in the model's dtype."""
        return t.detach().to(self.dtype).cpu().numpy().copy()

    @property
    def jitter(self) -> float:
        return self._config["jitter"]

    @property
    def device(self) -> torch.device:
        return self.feature.Z.device

    def _require_data(self) -> None:
        if self.y is None:
            raise RuntimeError(f"this {type(self).__name__} was saved without Y: it can predict "
                               "but not evaluate or fit the bound")

    # -- the bound and training -----------------------------------------------------------
    @abstractmethod
    def elbo(self) -> Tensor:
        """The bound with q(u) at its optimum (collapsed), differentiable."""

    @abstractmethod
    def _q_statistics(self) -> tuple[PsiSums, Tensor]:
        """The Ψ sums and noise whose optimal q(u) is the posterior's."""

    @abstractmethod
    def _minibatches(self) -> nn.Module:
        """The bound on minibatches with an explicit q(u), for `training.fit_minibatch`."""

    @abstractmethod
    def evaluation_work(self) -> float:
        """Flops of one evaluation of the bound, roughly (threads: `threads.threads_for`)."""

    def log_marginal_likelihood(self) -> float:
        """The bound on log p(Y) being maximised (a float)."""
        with torch.no_grad():
            return float(self.elbo())

    def _objective(self) -> Tensor:
        return self.elbo()

    fit_options = frozenset({"maxiter", "tol", "progress", "callback", "batch_size", "epochs",
                             "lr", "natgrad", "gamma", "seed"})

    def training_plan(self, options: FitOptions) -> TrainingPlan:
        """Maximise the bound over the variational parameters and the hyperparameters.

        `batch_size=None`: q(u) collapsed, L-BFGS-B (`maxiter`, default 2000; `tol`).
        Otherwise minibatches of `batch_size` rows (GP-LVM) or transitions (GPSSM) with an
        explicit q(u) started at the collapsed optimum: natural-gradient steps of size `gamma`
        on it with `natgrad` (default True), Adam (`lr`, default 0.01) on everything else, for
        `epochs` (default ~2,000 steps; batches drawn with `seed`, default 0). Options of the
        way not taken give a warning that names them. Either way the posterior afterwards
        uses the optimal q(u) given the fitted state."""
        if options.batch_size is None:
            return TrainingPlan("full-batch L-BFGS-B on the collapsed bound (`maxiter`)",
                                frozenset({"maxiter", "tol", "callback", "natgrad"}),
                                self._fit_collapsed, "minibatch training (batch_size given)")
        return TrainingPlan("minibatch training (`epochs` sets its length)",
                            self.fit_options - {"maxiter", "tol"}, self._fit_minibatch,
                            "the full-batch L-BFGS-B fit (no batch_size)")

    def _data_rows(self) -> int:
        """The observed rows (the GP-LVM's points, the GPSSM's time steps): the stall rule's N."""
        return max(1, int(self._config.get("num_data") or self._config.get("num_steps") or 1))

    def _fit_collapsed(self, o: FitOptions) -> FitResult:
        with threads_for(self.evaluation_work()):
            return fit_lbfgsb(self, maxiter=default(o.maxiter, MAXITER), tol=o.tol,
                              progress=o.progress, callback=o.callback,
                              stall=stall_rule(self._data_rows(), o))

    def _fit_minibatch(self, o: FitOptions) -> FitResult:
        batch_size = o.batch_size  # checked by fit_minibatch
        rows = max(1, int(self._config.get("num_data", 1)))
        share = min(1.0, batch_size / rows) if isinstance(batch_size, int) and batch_size > 0 else 1.0
        with threads_for(self.evaluation_work() * share):
            return fit_minibatch(self._minibatches(), batch_size, o.epochs, o.lr,
                                 default(o.natgrad, True), o.gamma, None, o.progress, o.seed,
                                 o.callback)

    # -- posterior ---------------------------------------------------------------------------
    def _build_posterior(self) -> SparsePosterior:
        L, used = Kuu_cholesky(self.feature, self.kernel, self.jitter)
        sums, noise = self._q_statistics()
        return SparsePosterior(self.kernel, self.feature, L, optimal_q(sums, L, noise), noise,
                               used)

    # -- prediction ---------------------------------------------------------------------------
    @property
    @abstractmethod
    def input_dim(self) -> int:
        """The width of the inputs of the mapping that is predicted (latent points, states)."""

    def _output_shift(self) -> Tensor | float:
        """What is added to the predicted mean (the centring of the outputs; 0 here)."""
        return 0.0

    #: what the inputs of predictions are called in messages
    input_name = "Xnew"

    def _internal_inputs(self, Xnew: Any, name: str = "Xnew") -> Tensor:
        return prediction_inputs(Xnew, self.input_name, self.input_dim, self.dtype, self.device)

    def predict_f(self, Xnew: Any, full_cov: bool = False) -> tuple[Any, Any]:
        """Mean [N*, D] and variance [N*, D] (covariance [D, N*, N*] with `full_cov`) of the
        mapping f at inputs [N*, Q]: numpy in, numpy out; a tensor in, differentiable tensors
        out."""
        with self._predicting(Xnew) as call:
            mean, var = call.posterior.predict_f(call.X, full_cov)
            D = mean.shape[1] if mean.dim() == 2 else 1
            mean = mean.reshape(call.X.shape[0], D)
            if full_cov:
                var = var.reshape(-1, call.X.shape[0], call.X.shape[0]).expand(D, -1, -1)
            else:
                var = var.reshape(call.X.shape[0], -1).expand(-1, D)
            return call.out(mean + self._output_shift(), var)

    def predict_y(self, Xnew: Any, full_cov: bool = False) -> tuple[Any, Any]:
        """As `predict_f`, with the Gaussian noise added: the predictive of the outputs."""
        with self._predicting(Xnew) as call:
            mean, var = call.posterior.predict_f(call.X, full_cov)
            n = call.X.shape[0]
            D = mean.shape[1] if mean.dim() == 2 else 1
            noise = call.posterior.noise_variance.to(mean.dtype).expand(D)
            if full_cov:
                var = var.reshape(-1, n, n).expand(D, -1, -1) + noise[:, None, None] * torch.eye(
                    n, dtype=var.dtype, device=var.device)
            else:
                var = var.reshape(n, -1).expand(-1, D) + noise
            return call.out(mean.reshape(n, D) + self._output_shift(), var)

    def predict_log_density(self, Xnew: Any, ynew: Any) -> Any:
        """log p(y* | data) [N*, D] of outputs ynew [N*, D] at inputs Xnew [N*, Q] (the
        Gaussian predictive of each output)."""
        return gaussian_log_density(*self.predict_y(Xnew), ynew)

    # -- persistence ----------------------------------------------------------------------
    def _restore_posterior(self, saved: dict[str, Any]) -> SparsePosterior:
        return SparsePosterior.from_state(self.kernel, self.feature, saved)
