"""The Bayesian GP-LVM (Titsias & Lawrence 2010): a GP from latent inputs to observed outputs.

Y [N, D] are D output columns of one GP over latent X [N, Q] with prior N(0, I) and a
variational q(X) = Π_n N(μ_n, diag S_n); the collapsed bound of `objectives/gplvm.py` is
maximised over q(X), the kernel, the noise and the inducing inputs (in latent space).
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from ..conditionals import WhitenedGaussian
from ..config import DEFAULT_JITTER, NOISE_FLOOR, PARAMETER_DTYPE, POSITIVE_FLOOR
from ..covariances import Kuu_cholesky
from ..features.inducing_points import InducingPoints
from ..kernels.base import Kernel
from ..kernels.stationary import SquaredExponential
from ..objectives.gplvm import (
    PsiSums,
    data_bound,
    kl_standard_normal,
    optimal_q,
    psi_sums,
    uncollapsed_data_term,
)
from ..objectives.psi import sample_rule
from ..objectives.svgp import whitened_kl
from ..parameters import Parameterised, as_user_value
from ..posteriors import SparsePosterior, frozen_copy
from ..registry import Registered
from ..threads import threads_for
from ..training import FitResult, fit_lbfgsb
from ..training.minibatch import fit_minibatch
from ..validation import as_tensor, check_finite
from .base import PARTS, check_jitter, state_key
from .classes import MODELS
from .persistence import save_model

_DTYPES = {"float32": torch.float32, "float64": torch.float64}


def _outputs(Y: Any, name: str = "Y", min_rows: int = 2) -> Tensor:
    """Y as a finite float64 [N, D] tensor (a 1-D array is one output column)."""
    t = check_finite(as_tensor(Y, name), name)
    if t.dim() == 1:
        t = t[:, None]
    if t.dim() != 2 or t.shape[0] < min_rows or t.shape[1] < 1:
        raise ValueError(f"{name} must be a 2-D array [N, D] with N ≥ {min_rows} rows; got "
                         f"shape {tuple(t.shape)}")
    return t.to(PARAMETER_DTYPE)


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer; got {value!r}")
    return int(value)


def pca_latents(Y: Tensor, Q: int, seed: int = 0) -> Tensor:
    """The first Q principal-component scores of the centred Y, each scaled to unit variance
    (columns beyond rank(Y) filled with seeded N(0, 0.01²) noise). [N, Q]."""
    Yc = Y - Y.mean(0)
    U, s, _ = torch.linalg.svd(Yc, full_matrices=False)
    k = min(Q, int((s > s[0] * 1e-10).sum()) if s[0] > 0 else 0)
    X = torch.empty(Y.shape[0], Q, dtype=Y.dtype, device=Y.device)
    X[:, :k] = U[:, :k] * (Y.shape[0] - 1) ** 0.5  # unit variance: std of U's columns is 1/√(N−1)
    g = torch.Generator().manual_seed(seed)
    X[:, k:] = 0.01 * torch.randn(Y.shape[0], Q - k, generator=g, dtype=Y.dtype).to(Y.device)
    return X


def inducing_inputs(value: Any, latent: Tensor, Q: int, default: int, seed: int, rows: str
                    ) -> InducingPoints:
    """Inducing points in a latent space: given [M, Q], or M (default `default`) chosen from
    the starting latent points [N, Q] by seeded k-means++."""
    if isinstance(value, Tensor | np.ndarray | list):
        feature = InducingPoints(value)
        if feature.input_dim != Q:
            raise ValueError(f"inducing_points must have {Q} columns (the latent dimension); "
                             f"got {feature.input_dim}")
        return feature
    M = _positive_int(default if value is None else value, "inducing_points")
    if M > latent.shape[0]:
        raise ValueError(f"inducing_points = {M} is more than the {latent.shape[0]} {rows}")
    return InducingPoints.from_data(latent, M, seed=seed)


class BayesianGPLVM(Registered, Parameterised):
    """Bayesian GP-LVM with M inducing points in a Q-dimensional latent space.

    `kernel` (default squared exponential with one lengthscale per latent dimension: ARD, so
    that the fitted lengthscales show how many dimensions the data use); its Ψ-statistics
    are closed-form for `SquaredExponential` and `Linear`, by quadrature for any other kernel
    (`objectives/psi.py`; `quadrature_points` per dimension). q(X) starts from the PCA scores
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

    registry = MODELS
    saves_data_by_default = True  # Y is what the latent points explain: keep it

    def __init__(self, Y: Any, latent_dim: int = 2, inducing_points: Any = None,
                 kernel: Kernel | None = None, noise_variance: Any = None, *,
                 X_mean: Any = None, X_variance: Any = None, jitter: float = DEFAULT_JITTER,
                 chunk_size: int | None = None, quadrature_points: int | None = None,
                 seed: int = 0, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        device = Y.device if isinstance(Y, Tensor) else torch.device("cpu")
        dtype = dtype or (Y.dtype if isinstance(Y, Tensor) and Y.is_floating_point()
                          else torch.float64)
        Y = _outputs(Y)
        N, D = Y.shape
        Q = _positive_int(latent_dim, "latent_dim")
        if kernel is None:
            kernel = SquaredExponential(lengthscale=torch.ones(Q))
        if not isinstance(kernel, Kernel):
            raise TypeError(f"kernel must be a sparsegp kernel; got {type(kernel).__name__}")
        mu = pca_latents(Y, Q, seed) if X_mean is None else self._latent(X_mean, "X_mean", N, Q)
        feature = inducing_inputs(inducing_points, mu, Q, min(N, 30), seed, "rows of Y")
        config = {"num_data": N, "output_dim": D, "latent_dim": Q,
                  "jitter": check_jitter(jitter), "chunk_size": chunk_size,
                  "quadrature_points": quadrature_points, "dtype": str(dtype).replace("torch.", "")}
        self._build(config, {"kernel": kernel, "feature": feature})
        self.to(device)
        Y = Y.to(device)
        with torch.no_grad():
            self.y_shift.copy_(Y.mean(0))
        self.y = Y - self.y_shift
        signal = float(self.y.var(0).mean()) or 1.0
        self.kernel.initialise_from_data(mu, signal)
        self.set_value("X_mean", mu)
        self.set_value("X_variance", torch.full((N, Q), 0.1) if X_variance is None
                       else self._latent(X_variance, "X_variance", N, Q))
        self.set_value("noise_variance", signal / 20.0 if noise_variance is None
                       else noise_variance)

    @staticmethod
    def _latent(value: Any, name: str, N: int, Q: int) -> Tensor:
        t = check_finite(as_tensor(value, name), name).to(PARAMETER_DTYPE)
        if tuple(t.shape) != (N, Q):
            raise ValueError(f"{name} must have shape ({N}, {Q}) [N, latent_dim]; got "
                             f"{tuple(t.shape)}")
        return t

    def _build(self, config: dict[str, Any], parts: dict[str, Any]) -> None:
        self._config = dict(config)
        N, D, Q = config["num_data"], config["output_dim"], config["latent_dim"]
        self.kernel = parts["kernel"].to(dtype=PARAMETER_DTYPE)
        self.feature = parts["feature"].to(dtype=PARAMETER_DTYPE)
        self._add_free("X_mean", torch.zeros(N, Q, dtype=PARAMETER_DTYPE))
        self._add_positive("X_variance", torch.ones(N, Q, dtype=PARAMETER_DTYPE), POSITIVE_FLOOR,
                           max_dim=2)
        self._add_positive("noise_variance", 1.0, NOISE_FLOOR)
        self.register_buffer("y_shift", torch.zeros(D, dtype=PARAMETER_DTYPE))
        self.register_buffer("X", None, persistent=False)  # no observed inputs
        self.register_buffer("y", None, persistent=False)  # centred Y [N, D]
        self._cache: tuple[SparsePosterior, tuple] | None = None
        self.metadata: dict[str, Any] = {}

    @classmethod
    def _restore(cls, config: dict[str, Any], state: dict[str, Tensor]) -> BayesianGPLVM:
        model = cls.__new__(cls)
        Parameterised.__init__(model)
        model._build(config, {name: PARTS[name].build(config[name]) for name in ("kernel",
                                                                                  "feature")})
        return model

    # -- what users read ------------------------------------------------------------------
    @property
    def latent_mean(self) -> np.ndarray:
        """μ [N, Q]: the means of q(x_n)."""
        return as_user_value(self.X_mean)

    @property
    def latent_variance(self) -> np.ndarray:
        """S [N, Q]: the variances of q(x_n)."""
        return as_user_value(self.value("X_variance"))

    @property
    def noise_variance(self) -> float:
        return as_user_value(self.value("noise_variance"))

    @noise_variance.setter
    def noise_variance(self, v: Any) -> None:
        self.set_value("noise_variance", v)

    @property
    def inducing_points(self) -> np.ndarray:
        return as_user_value(self.feature.Z)

    @property
    def num_data(self) -> int:
        return self._config["num_data"]

    @property
    def num_inducing(self) -> int:
        return self.feature.num_inducing

    @property
    def latent_dim(self) -> int:
        return self._config["latent_dim"]

    @property
    def jitter(self) -> float:
        return self._config["jitter"]

    @property
    def dtype(self) -> torch.dtype:
        return _DTYPES[self._config["dtype"]]

    @property
    def device(self) -> torch.device:
        return self.y_shift.device

    # -- the objective --------------------------------------------------------------------
    def _rule(self) -> tuple[Tensor, Tensor] | None:
        points = self._config["quadrature_points"]
        return None if points is None else sample_rule(self.latent_dim, self.y_shift, points)

    def _sums(self, Y: Tensor, mu: Tensor, S: Tensor) -> PsiSums:
        return psi_sums(self.kernel, self.feature.Z, Y, mu, S, rule=self._rule(),
                        chunk_size=self._config["chunk_size"])

    def _require_data(self) -> None:
        if self.y is None:
            raise RuntimeError("this BayesianGPLVM was saved without Y: it can predict but not "
                               "evaluate or fit the bound")

    def elbo_terms(self) -> tuple[Tensor, Tensor]:
        """(E_q(X)[log p(Y | X)] bound, KL(q(X) ‖ p(X))): the bound is their difference."""
        self._require_data()
        S = self.value("X_variance")
        L, _ = Kuu_cholesky(self.feature, self.kernel, self.jitter)
        data = data_bound(self._sums(self.y, self.X_mean, S), L, self.value("noise_variance"))
        return data, kl_standard_normal(self.X_mean, S)

    def log_marginal_likelihood(self) -> float:
        """The bound on log p(Y) being maximised (a float)."""
        with torch.no_grad():
            data, kl = self.elbo_terms()
        return float(data - kl)

    def training_loss(self) -> Tensor:
        """Minus (bound + log priors), differentiable: what `fit()` minimises."""
        data, kl = self.elbo_terms()
        return -(data - kl + self.log_prior())

    def evaluation_work(self) -> float:
        N, M, Q = self.num_data, self.num_inducing, self.latent_dim
        return float(N * M * M * Q + M**3)

    def fit(self, maxiter: int = 1000, tol: float | None = None, progress: bool | None = None,
            callback: Any = None, *, batch_size: int | None = None, epochs: int | None = None,
            lr: float = 0.01, natgrad: bool = True, gamma: float | None = None, seed: int = 0
            ) -> FitResult:
        """Maximise the bound over q(X), the kernel, the noise and Z.

        `batch_size=None`: the collapsed bound with L-BFGS-B (`maxiter`, `tol`). Otherwise
        minibatches of rows of Y (large N): an explicit q(u) (SVGP-style, started at the
        collapsed optimum; `uncollapsed_data_term`), natural-gradient steps of size `gamma` on
        it with `natgrad`, Adam (`lr`) on everything else, for `epochs` (default ~2,000
        steps). Either way the posterior afterwards uses the optimal q(u) given the fitted q(X)
        and hyperparameters."""
        self._require_data()
        if batch_size is None:
            with threads_for(self.evaluation_work()):
                return fit_lbfgsb(self, maxiter=maxiter, tol=tol, progress=progress,
                                  callback=callback)
        steps = _MinibatchBound(self)
        B = float(min(self.num_data, batch_size))
        with threads_for(B * self.num_inducing**2 * self.latent_dim + self.num_inducing**3):
            return fit_minibatch(steps, batch_size, epochs, lr, natgrad, gamma, None, progress,
                                 seed, callback)

    # -- posterior and prediction ---------------------------------------------------------
    def posterior(self) -> SparsePosterior:
        """q(f*) at latent inputs from the bound's optimal q(u) (D mean columns), cached
        under the whole state."""
        key = state_key(self)
        if self._cache is not None and self._cache[1] == key:
            return self._cache[0]
        self._require_data()
        with torch.no_grad():
            L, used = Kuu_cholesky(self.feature, self.kernel, self.jitter)
            S = self.value("X_variance")
            noise = self.value("noise_variance")
            q = optimal_q(self._sums(self.y, self.X_mean, S), L, noise)
            post = SparsePosterior(self.kernel, self.feature, L, q, noise, used)
        self._cache = (post, key)
        return post

    def predict(self, Xlatent: Any, include_noise: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance [N*, D] of f (or y with `include_noise`) at latent points [N*, Q]."""
        X = check_finite(as_tensor(Xlatent, "Xlatent"), "Xlatent").to(PARAMETER_DTYPE)
        if X.dim() != 2 or X.shape[1] != self.latent_dim:
            raise ValueError(f"Xlatent must have shape [N*, {self.latent_dim}] (latent_dim "
                             f"columns); got {tuple(X.shape)}")
        post = self.posterior()
        mean, var = post.predict_f(X.to(self.device))
        D = self._config["output_dim"]
        mean, var = mean.reshape(-1, D), var.reshape(X.shape[0], -1).expand(-1, D)
        if include_noise:
            var = var + post.noise_variance
        return (self._out(mean + self.y_shift), self._out(var))

    def _out(self, t: Tensor) -> np.ndarray:
        return t.detach().to(self.dtype).cpu().numpy().copy()

    # -- new points -----------------------------------------------------------------------
    def transform(self, Ynew: Any, maxiter: int = 200) -> tuple[np.ndarray, np.ndarray]:
        """q(x*) = N(mean, diag var) [N*, Q] for new rows of outputs, the model held fixed:
        maximises the bound on log p(Y, Ynew) over q(x*) only (Titsias & Lawrence 2010, §4.1),
        from the latent mean of the nearest training row."""
        self._require_data()
        Yn = _outputs(Ynew, "Ynew", 1).to(self.device)
        if Yn.shape[1] != self._config["output_dim"]:
            raise ValueError(f"Ynew must have {self._config['output_dim']} columns (those of "
                             f"Y); got {Yn.shape[1]}")
        Yn = Yn - self.y_shift
        with torch.no_grad():
            L, _ = Kuu_cholesky(self.feature, self.kernel, self.jitter)
            fixed = self._sums(self.y, self.X_mean, self.value("X_variance"))
            nearest = torch.cdist(Yn, self.y).argmin(1)
        new = _NewLatents(self, Yn, self.X_mean.detach()[nearest],
                          self.value("X_variance").detach()[nearest], fixed, L.detach())
        fit_lbfgsb(new, maxiter=maxiter, progress=False)
        return self._out(new.X_mean), self._out(new.value("X_variance"))

    # -- persistence ----------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        return {**self._config, "kernel": self.kernel.config(), "feature": self.feature.config()}

    def data_extras(self) -> dict[str, Tensor]:
        return {}

    def save(self, path: Any, include_data: bool | None = None) -> None:
        """Save the fitted model with Y (unless `include_data=False`); see `sparsegp.load`."""
        save_model(self, path, include_data)

    def _restore_posterior(self, saved: dict[str, Any]) -> SparsePosterior:
        return SparsePosterior.from_state(self.kernel, self.feature, saved)

    def _adopt_posterior(self, post: SparsePosterior) -> None:
        self._cache = (post, state_key(self))

    def __repr__(self) -> str:
        return (f"BayesianGPLVM(N={self.num_data}, D={self._config['output_dim']}, "
                f"Q={self.latent_dim}, M={self.num_inducing})\n{self.summary()}")


class _NewLatents(Parameterised):
    """q(x*) for new rows: the bound on log p(Y, Ynew) with everything but (μ*, S*) fixed."""

    def __init__(self, model: BayesianGPLVM, Yn: Tensor, mu: Tensor, S: Tensor,
                 fixed: PsiSums, L: Tensor) -> None:
        super().__init__()
        # frozen copies, not submodules: only (μ*, S*) reach the optimiser and the gradient
        self.kernel, self.Z = frozen_copy(model.kernel), model.feature.Z.detach()
        self.rule, self.chunk_size = model._rule(), model._config["chunk_size"]
        self.noise = model.value("noise_variance").detach()
        self.Yn, self.fixed, self.L = Yn, fixed, L
        self._add_free("X_mean", mu.clone())
        self._add_positive("X_variance", S.clamp_min(2 * POSITIVE_FLOOR), POSITIVE_FLOOR,
                           max_dim=2)

    def training_loss(self) -> Tensor:
        S = self.value("X_variance")
        new = psi_sums(self.kernel, self.Z, self.Yn, self.X_mean, S, rule=self.rule,
                       chunk_size=self.chunk_size)
        data = data_bound(self.fixed + new, self.L, self.noise)
        return -(data - kl_standard_normal(self.X_mean, S))



class _MinibatchBound(nn.Module):
    """The GP-LVM bound on minibatches of rows, with an explicit whitened q(v_d) = N(m_d, S_d)
    per output, in the form `training.fit_minibatch` trains (its `X` are row indices)."""

    def __init__(self, model: BayesianGPLVM) -> None:
        super().__init__()
        self.model = model
        with torch.no_grad():  # start q(u) at the collapsed optimum (one streamed pass)
            L, _ = Kuu_cholesky(model.feature, model.kernel, model.jitter)
            sums = model._sums(model.y, model.X_mean, model.value("X_variance"))
            q = optimal_q(sums, L, model.value("noise_variance"))
            root = torch.linalg.cholesky(q.covariance[0])
        D = model.y.shape[1]
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
