"""The Bayesian GP-LVM (Titsias & Lawrence 2010): a GP from latent inputs to observed outputs.

Y [N, D] are D output columns of one GP over latent X [N, Q] with prior N(0, I) and a
variational q(X) = Π_n N(μ_n, diag S_n); the collapsed bound of `objectives/latent/gplvm.py` is
maximised over q(X), the kernel, the noise and the inducing inputs (in latent space).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from ..conditionals import WhitenedGaussian
from ..covariances import Kuu_cholesky
from ..features.base import InducingLike
from ..kernels.base import Kernel
from ..objectives.latent.gplvm import (
    PsiSums,
    data_bound,
    kl_standard_normal,
    optimal_q,
    psi_sums,
    summed,
    uncollapsed_data_term,
)
from ..objectives.latent.psi import MAX_NODES, max_points, sample_rule
from ..objectives.svgp import whitened_kl
from ..parameters import Parameterised, as_user_array, as_user_value
from ..posteriors import frozen_copy
from ..runtime.chunking import check_chunk_size
from ..runtime.config import DEFAULT_JITTER, NOISE_FLOOR, PARAMETER_DTYPE, POSITIVE_FLOOR
from ..training import fit_lbfgsb
from ..validation import ArrayLike, as_tensor, check_finite, model_dtype, one_or_per, positive_int
from .core.dtypes import dtype_name
from .core.latent import (
    LatentInputModel,
    LatentSpec,
    check_output_scale,
    checked_kernel,
    inducing_inputs,
    outputs,
    pca_latents,
)
from .core.model import Parts
from .core.options import check_jitter
from .core.spec import ModelSpec


@dataclass(frozen=True, kw_only=True)
class GPLVMSpec(LatentSpec):
    """`BayesianGPLVM`'s spec: the latent dimension, the quadrature points per dimension of
    the Ψ-statistics (None: closed forms), one noise variance per output or one."""

    latent_dim: int
    quadrature_points: int | None = None
    noise_per_output: bool = False


class BayesianGPLVM(LatentInputModel):
    """Bayesian GP-LVM with M inducing points in a Q-dimensional latent space.

    `kernel` (default squared exponential with one lengthscale per latent dimension: ARD, so
    that the fitted lengthscales show how many dimensions the data use); its Ψ-statistics
    are closed-form for `SquaredExponential` and `Linear`, by quadrature for any other kernel
    (`objectives/latent/psi.py`; `quadrature_points` per dimension). q(X) starts from the PCA scores
    of Y (or `X_mean`), with variances `X_variance` (default 0.1); Z from k-means++ on those.
    Y is centred by its column means (added back in predictions). Shapes: Y [N, D].
    `fit()` maximises the bound (L-BFGS-B), `transform(Ynew)` finds q(x*) for new rows,
    `predict(Xlatent)` gives the outputs at latent points.

    >>> import numpy as np, sparsegp as sg
    >>> t = np.linspace(0, 6, 60); Y = np.c_[np.sin(t), np.cos(t), 0.5 * t]
    >>> m = sg.BayesianGPLVM(Y, latent_dim=2, inducing_points=10); _ = m.fit(maxiter=50)
    >>> m.latent_mean.shape
    (60, 2)
    """

    spec: GPLVMSpec
    spec_type: ClassVar[type[ModelSpec]] = GPLVMSpec
    X_mean: Tensor  # a parameter: the means of q(x_n) [N, Q]
    y_shift: Tensor  # a buffer [D]: y is stored as Y − y_shift

    def __init__(self, Y: ArrayLike, latent_dim: int = 2, inducing_points: InducingLike = None,
                 kernel: Kernel | None = None, noise_variance: Any = None, *,
                 X_mean: Any = None, X_variance: Any = None, jitter: float = DEFAULT_JITTER,
                 chunk_size: int | None = None, quadrature_points: int | None = None,
                 seed: int = 0, dtype: torch.dtype | None = None) -> None:
        device = Y.device if isinstance(Y, Tensor) else torch.device("cpu")
        dtype = model_dtype(Y, None, dtype)
        Y = outputs(Y)
        N, D = Y.shape
        Q = positive_int(latent_dim, "latent_dim")
        kernel = checked_kernel(kernel, Q)
        mu = pca_latents(Y, Q, seed) if X_mean is None else self._latent(X_mean, "X_mean", N, Q)
        feature = inducing_inputs(inducing_points, mu, Q, min(N, 30), seed,
                                  "starting latent points (rows of Y)")
        if quadrature_points is not None:
            quadrature_points = _points_per_dimension(quadrature_points, Q)
        per_output = noise_variance is not None and (noise_variance.numel() if isinstance(
            noise_variance, Tensor) else np.size(noise_variance)) > 1
        spec = GPLVMSpec(num_data=N, output_dim=D, latent_dim=Q, jitter=check_jitter(jitter),
                         chunk_size=check_chunk_size(chunk_size),
                         quadrature_points=quadrature_points, dtype=dtype_name(dtype),
                         noise_per_output=per_output)  # one noise variance per column of Y
        self._construct(spec, {"kernel": kernel.to(device), "feature": feature.to(device)})
        Y = Y.to(device)
        with torch.no_grad():
            self.y_shift.copy_(Y.mean(0))
        self.y = Y - self.y_shift
        signal = float(self.y.var(0).mean()) or 1.0
        check_output_scale(signal, noise_variance is None, "BayesianGPLVM")
        self.kernel.initialise_from_data(mu, signal)
        self.set_value("X_mean", mu)
        self.set_value("X_variance", torch.full((N, Q), 0.1) if X_variance is None
                       else self._latent(X_variance, "X_variance", N, Q))
        self.set_value("noise_variance", signal / 20.0 if noise_variance is None
                       else one_or_per(noise_variance, Y.shape[1], "noise_variance",
                                       "column of Y"))

    @staticmethod
    def _latent(value: Any, name: str, N: int, Q: int) -> Tensor:
        t = check_finite(as_tensor(value, name), name).to(PARAMETER_DTYPE)
        if tuple(t.shape) != (N, Q):
            raise ValueError(f"{name} must have shape ({N}, {Q}) [N, latent_dim]; got "
                             f"{tuple(t.shape)}")
        return t

    def _declare(self, spec: ModelSpec, parts: Parts) -> None:
        assert isinstance(spec, GPLVMSpec)
        self._declare_parts(parts)
        N, Q, D = spec.num_data, spec.latent_dim, spec.output_dim
        self._add_free("X_mean", torch.zeros(N, Q, dtype=PARAMETER_DTYPE))
        self._add_positive("X_variance", torch.ones(N, Q, dtype=PARAMETER_DTYPE), POSITIVE_FLOOR,
                           max_dim=2)
        self._add_positive("noise_variance", torch.ones(D, dtype=PARAMETER_DTYPE)
                           if spec.noise_per_output else 1.0, NOISE_FLOOR)
        self.register_buffer("y_shift", torch.zeros(D, dtype=PARAMETER_DTYPE))  # y: Y − y_shift

    # -- what users read ------------------------------------------------------------------
    @property
    def latent_mean(self) -> np.ndarray:
        """μ [N, Q]: the means of q(x_n)."""
        return as_user_array(self.X_mean)

    @property
    def latent_variance(self) -> np.ndarray:
        """S [N, Q]: the variances of q(x_n)."""
        return as_user_array(self.value("X_variance"))

    @property
    def noise_variance(self) -> float | np.ndarray:
        return as_user_value(self.value("noise_variance"))

    @noise_variance.setter
    def noise_variance(self, v: Any) -> None:
        self.set_value("noise_variance", v)

    @property
    def latent_dim(self) -> int:
        return self.spec.latent_dim

    # -- the objective --------------------------------------------------------------------
    def _rule(self) -> tuple[Tensor, Tensor] | None:
        points = self.spec.quadrature_points
        return None if points is None else sample_rule(self.latent_dim, self.y_shift, points)

    def _sums(self, Y: Tensor, mu: Tensor, S: Tensor) -> PsiSums:
        return psi_sums(self.kernel, self.feature.Z, Y, mu, S, rule=self._rule(),
                        chunk_size=self.spec.chunk_size)

    def elbo_terms(self) -> tuple[Tensor, Tensor]:
        """(E_q(X)[log p(Y | X)] bound, KL(q(X) ‖ p(X))): the bound is their difference."""
        self._require_data()
        S = self.value("X_variance")
        L, _ = Kuu_cholesky(self.feature, self.kernel, self.jitter)
        data = data_bound(self._sums(self._outputs(), self.X_mean, S), L, self.value("noise_variance"))
        return data, kl_standard_normal(self.X_mean, S)

    def elbo(self) -> Tensor:
        """The collapsed bound on log p(Y), differentiable."""
        data, kl = self.elbo_terms()
        return data - kl

    def evaluation_work(self) -> float:
        N, M, Q = self.num_data, self.num_inducing, self.latent_dim
        return float(N * M * M * Q + M**3)

    def _q_statistics(self) -> tuple[PsiSums, Tensor]:
        sums = self._sums(self._outputs(), self.X_mean, self.value("X_variance"))
        return sums, self.value("noise_variance")

    def _minibatches(self) -> nn.Module:
        return _MinibatchBound(self)

    input_name = "Xlatent"

    @property
    def input_dim(self) -> int:
        return self.latent_dim

    def _output_shift(self) -> Tensor:
        return self.y_shift

    def _observation_noise(self) -> Tensor:
        return self.value("noise_variance")

    def predict(self, Xlatent: ArrayLike, include_noise: bool = False  # type: ignore[override]
                ) -> tuple[Any, Any]:
        """Mean and variance [N*, D] of f (or y with `include_noise`) at latent points [N*, Q]
        (`predict_f` / `predict_y`)."""
        return (self.predict_y if include_noise else self.predict_f)(Xlatent)

    # -- new points -----------------------------------------------------------------------
    def transform(self, Ynew: ArrayLike, maxiter: int = 200) -> tuple[np.ndarray, np.ndarray]:
        """q(x*) = N(mean, diag var) [N*, Q] for new rows of outputs, the model held fixed:
        maximises the bound on log p(Y, Ynew) over q(x*) only (Titsias & Lawrence 2010, §4.1),
        from the latent mean of the nearest training row."""
        self._require_data()
        Yn = outputs(Ynew, "Ynew", 1).to(self.device)
        D = self.spec.output_dim
        if Yn.shape[1] != D:
            one_row = np.ndim(Ynew) == 1 and Yn.shape[0] == D
            raise ValueError(f"Ynew must have {D} columns (those of Y); got {Yn.shape[1]}"
                             + (f" (a 1-D array is one column; one row of Y is Ynew[None, :], "
                                f"shape (1, {D}))" if one_row else ""))
        Yn = Yn - self.y_shift
        with torch.no_grad():
            L, _ = Kuu_cholesky(self.feature, self.kernel, self.jitter)
            Y = self._outputs()
            fixed = self._sums(Y, self.X_mean, self.value("X_variance"))
            nearest = torch.cdist(Yn, Y).argmin(1)
        new = _NewLatents(self, Yn, self.X_mean.detach()[nearest],
                          self.value("X_variance").detach()[nearest], fixed, L.detach())
        fit_lbfgsb(new, maxiter=maxiter, progress=False)
        return self._out(new.X_mean), self._out(new.value("X_variance"))

    def __repr__(self) -> str:
        return (f"BayesianGPLVM(N={self.num_data}, D={self.spec.output_dim}, "
                f"Q={self.latent_dim}, M={self.num_inducing})\n{self.summary()}")


class _NewLatents(Parameterised):
    """q(x*) for new rows: the bound on log p(Y, Ynew) with everything but (μ*, S*) fixed."""

    X_mean: Tensor  # a parameter: μ* [N*, Q]

    def __init__(self, model: BayesianGPLVM, Yn: Tensor, mu: Tensor, S: Tensor,
                 fixed: PsiSums, L: Tensor) -> None:
        super().__init__()
        # frozen copies, not submodules: only (μ*, S*) reach the optimiser and the gradient
        self.kernel, self.Z = frozen_copy(model.kernel), model.feature.Z.detach()
        self.rule, self.chunk_size = model._rule(), model.spec.chunk_size
        self.noise = model.value("noise_variance").detach()
        self.Yn, self.fixed, self.L = Yn, fixed, L
        self._add_free("X_mean", mu.clone())
        self._add_positive("X_variance", S.clamp_min(2 * POSITIVE_FLOOR), POSITIVE_FLOOR,
                           max_dim=2)

    def training_loss(self) -> Tensor:
        S = self.value("X_variance")
        new = psi_sums(self.kernel, self.Z, self.Yn, self.X_mean, S, rule=self.rule,
                       chunk_size=self.chunk_size)
        data = data_bound(summed(self.fixed, new), self.L, self.noise)
        return -(data - kl_standard_normal(self.X_mean, S))


class _MinibatchBound(nn.Module):
    """The GP-LVM bound on minibatches of rows, with an explicit whitened q(v_d) = N(m_d, S_d)
    per output, in the form `training.fit_minibatch` trains (its `X` are row indices)."""

    def __init__(self, model: BayesianGPLVM) -> None:
        super().__init__()
        self.model = model
        self.display_name = type(model).__name__
        with torch.no_grad():  # start q(u) at the collapsed optimum (one streamed pass)
            L, _ = Kuu_cholesky(model.feature, model.kernel, model.jitter)
            sums = model._sums(model._outputs(), model.X_mean, model.value("X_variance"))
            q = optimal_q(sums, L, model.value("noise_variance"))
            root = torch.linalg.cholesky(q.covariance[0])
        D = model._outputs().shape[1]
        self.q_mu = nn.Parameter(q.mean.clone())
        self.q_sqrt = nn.Parameter(root.expand(D, *root.shape).clone())
        self.num_data = model.num_data
        self.X = torch.arange(model.num_data, device=model.device)
        self.y = model.y

    def elbo(self, rows: Tensor, Yb: Tensor, q_mu: Tensor | None = None,
             q_sqrt: Tensor | None = None) -> Tensor:
        """(N/B)(data term − KL(q(X_b))) − KL(q(v)): unbiased for the bound at this q(u)."""
        m = self.model
        mu, S = m.X_mean[rows], m.value("X_variance")[rows]
        L, _ = Kuu_cholesky(m.feature, m.kernel, m.jitter)
        q = WhitenedGaussian(self.q_mu if q_mu is None else q_mu,
                             (self.q_sqrt if q_sqrt is None else q_sqrt).tril())
        data = uncollapsed_data_term(m._sums(Yb, mu, S), L, m.value("noise_variance"), q)
        scale = self.num_data / rows.shape[0]
        return scale * (data - kl_standard_normal(mu, S)) - whitened_kl(q)

    def forward(self, rows: Tensor, Yb: Tensor) -> Tensor:
        return -(self.elbo(rows, Yb) + self.model.log_prior())

    def log_prior(self) -> Tensor:
        return self.model.log_prior()


def _points_per_dimension(points: Any, Q: int) -> int:
    """Gauss–Hermite points per latent dimension: 2 up to the most whose product rule keeps
    MAX_NODES nodes (None, the default, takes that most, or Monte Carlo beyond it)."""
    points = positive_int(points, "quadrature_points")
    most = max_points(Q)
    if not 2 <= points <= most:
        raise ValueError(f"quadrature_points must lie between 2 and {most} for latent_dim={Q} "
                         f"(a product rule of at most {MAX_NODES} nodes; None chooses); got "
                         f"{points}" if most >= 2 else
                         f"quadrature_points: with latent_dim={Q} a product rule would exceed "
                         f"{MAX_NODES} nodes; leave it None (Monte Carlo)")
    return points
