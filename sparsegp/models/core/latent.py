"""What the random-input models (the Bayesian GP-LVM and the GPSSM) share: outputs Y, latent
inputs with a Gaussian q per row, a kernel and inducing points in the latent space, a bound
with q(u) collapsed (L-BFGS-B) or explicit (minibatches), the posterior from the optimal q(u),
and persistence."""

from __future__ import annotations

import numbers
import warnings
from abc import abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import numpy as np
import torch
from torch import Tensor, nn

from ...covariances import Kuu_cholesky
from ...features.inducing_points import InducingPoints
from ...features.initialisation import initial_inducing_inputs
from ...kernels.base import Kernel
from ...kernels.separate import Separate
from ...kernels.stationary import SquaredExponential
from ...objectives.latent.gplvm import PsiSums, optimal_q
from ...parameters import Parameterised, as_user_array
from ...posteriors import SparsePosterior
from ...runtime.config import NOISE_FLOOR, PARAMETER_DTYPE, POSITIVE_FLOOR
from ...runtime.threads import threads_for
from ...training import FitResult, fit_lbfgsb
from ...training.lbfgs import MAXITER
from ...training.minibatch import fit_minibatch
from ...validation import (
    GOOD_SPREAD,
    ArrayLike,
    ScaleWarning,
    as_tensor,
    check_finite,
    positive_int,
    seeded_generator,
)
from .fitting import FitOptions, TrainingPlan, default, stall_rule
from .model import Model, Parts
from .noise import Noise
from .options import ModelOptions
from .predictions import Observations, prediction_inputs
from .spec import ModelSpec
from .units import Units


def outputs(Y: ArrayLike, name: str = "Y", min_rows: int = 2) -> Tensor:
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


def checked_kernel(kernel: Kernel | None, Q: int) -> Kernel:
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


@dataclass(frozen=True, kw_only=True)
class LatentSpec(ModelSpec):
    """A random-input model's spec: the output columns, the relative jitter and the rows per
    chunk; its inputs are its latent dimension (the `input_dim` field is not used: 0)."""

    input_dim: int = 0
    output_dim: int
    chunk_size: int | None = None


class LatentInputModel(Model[ModelOptions]):
    """Base of the random-input models; subclasses give the bound and the optimal q(u)."""

    saves_data_by_default: ClassVar[bool] = True  # Y is what the latent points explain: keep it

    spec: LatentSpec
    feature: InducingPoints

    def _declare_parts(self, parts: Parts) -> None:
        """The kernel and the inducing points in the latent space (no observed inputs)."""
        self.kernel = parts["kernel"].to(dtype=PARAMETER_DTYPE)
        self.feature = cast(InducingPoints, parts["feature"].to(dtype=PARAMETER_DTYPE))

    # -- what users read ------------------------------------------------------------------
    @property
    def inducing_points(self) -> np.ndarray:
        """Z [M, Q]: the inducing inputs in the latent space."""
        return as_user_array(self.feature.Z)

    def _out(self, t: Tensor) -> np.ndarray:
        """A tensor as a numpy array in the model's dtype."""
        return t.detach().to(self.dtype).cpu().numpy().copy()

    @property
    def device(self) -> torch.device:
        return self.feature.Z.device

    @property
    def units(self) -> Units:
        """The latent inputs have no units of their own; the outputs are centred by
        `_output_shift`."""
        zero = torch.zeros(self.input_dim, dtype=PARAMETER_DTYPE, device=self.device)
        one = torch.ones((), dtype=PARAMETER_DTYPE, device=self.device)
        shift = self._output_shift()
        return Units(zero, zero + 1, shift if isinstance(shift, Tensor) else one * shift, one)

    def _require_data(self) -> None:
        if self.y is None:
            raise RuntimeError(f"this {type(self).__name__} was saved without Y: it can predict "
                               "but not evaluate or fit the bound")

    def _outputs(self) -> Tensor:
        """Y [N, D] as the bound takes it (centred), or the error of `_require_data`."""
        self._require_data()
        assert self.y is not None
        return self.y

    def posterior(self) -> SparsePosterior:
        """The frozen posterior q(f) of the mapping, from the optimal q(u) at the current state
        (cached under the whole state, as every model's)."""
        return cast(SparsePosterior, super().posterior())

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

    def _objective(self) -> Tensor:
        return self.elbo()

    fit_options: ClassVar[frozenset[str]] = frozenset({
        "maxiter", "tol", "progress", "callback", "batch_size", "epochs", "lr", "natgrad",
        "gamma", "seed"})

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

    def _fit_collapsed(self, o: FitOptions) -> FitResult:
        with threads_for(self.evaluation_work()):
            return fit_lbfgsb(self, maxiter=default(o.maxiter, MAXITER), tol=o.tol,
                              progress=o.progress, callback=o.callback,
                              stall=stall_rule(max(1, self.num_data), o))

    def _fit_minibatch(self, o: FitOptions) -> FitResult:
        batch_size = o.batch_size  # checked by fit_minibatch
        rows = max(1, self.num_data)
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

    def _restore_posterior(self, saved: dict[str, Any]) -> SparsePosterior:
        return SparsePosterior.from_state(self.kernel, self.feature, saved)

    # -- prediction ---------------------------------------------------------------------------
    def _output_shift(self) -> Tensor | float:
        """What is added to the predicted mean (the centring of the outputs; 0 here)."""
        return 0.0

    @abstractmethod
    def _observation_noise(self) -> Tensor:
        """The variance of the outputs' noise around the mapping ([] or one per output)."""

    def _output_columns(self) -> int:
        """The columns of the predictions (of the mapping's outputs)."""
        return self.spec.output_dim

    #: what the inputs of predictions are called in messages
    input_name = "Xnew"

    def _internal_inputs(self, Xnew: ArrayLike, name: str = "Xnew") -> Tensor:
        return prediction_inputs(Xnew, self.input_name, self.input_dim, self.dtype, self.device)

    def _keeps_columns(self) -> bool:
        return True  # the D outputs of the mapping, one included

    def _observations(self, rows: int, noise_variance: Any, noise_groups: Any
                      ) -> Observations:
        self._no_new_noise(noise_variance, noise_groups)
        return Noise(self._observation_noise())

    def _new_targets(self, ynew: ArrayLike, rows: int) -> Tensor:
        """Outputs [rows, D] at the new latent points, centred as Y is."""
        t = (ynew.to(PARAMETER_DTYPE) if isinstance(ynew, Tensor)
             else torch.as_tensor(np.asarray(ynew, dtype=np.float64), dtype=PARAMETER_DTYPE))
        D = self._output_columns()
        if t.dim() == 1 and D == 1:
            t = t[:, None]
        if list(t.shape) != [rows, D]:
            raise ValueError(f"ynew must have shape {[rows, D]} (one target per prediction); "
                             f"got {list(t.shape)}")
        return self.units.targets(t.to(self.device))

    def summary(self, labels: dict[str, list[str]] | None = None) -> str:
        """The table of every parameter's value, trainability and prior."""
        return Parameterised.summary(self, labels)
