"""The Gaussian process state-space model (Frigola et al. 2014; van der Wilk 2018, §6.3).

One observed sequence Y [T, P]; latent states x_t ∈ R^Q with a GP transition and a linear-
Gaussian emission; the bound of `objectives/latent/gpssm.py` with a Gauss–Markov q(x) (one chain per
state dimension; or mean-field over time) independent of q(u).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from ..conditionals import WhitenedGaussian
from ..covariances import Kuf, Kuu_cholesky
from ..features.base import InducingLike
from ..kernels.base import Kernel
from ..objectives.latent.gplvm import PsiSums, data_bound, optimal_q, uncollapsed_data_term
from ..objectives.latent.gpssm import (
    chain_entropy,
    coupling,
    emission_term,
    entropy,
    initial_term,
    transition_sums,
)
from ..objectives.latent.particle_gibbs import Emission, PosteriorSamples, particle_gibbs
from ..objectives.svgp import whitened_kl
from ..parameters import as_user_array
from ..runtime.chunking import check_chunk_size
from ..runtime.config import DEFAULT_JITTER, NOISE_FLOOR, PARAMETER_DTYPE, POSITIVE_FLOOR
from ..training.progress import progress_bar
from ..validation import (
    ArrayLike,
    as_tensor,
    check_bool,
    check_finite,
    model_dtype,
    one_or_per,
    positive_int,
    seeded_generator,
)
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
class GPSSMSpec(LatentSpec):
    """`GPSSM`'s spec: the time steps (saved as "num_steps"), the state dimension, whether the
    emission is learned, and whether q(x) is a Gauss–Markov chain (else mean-field)."""

    renamed: ClassVar[dict[str, str]] = {"num_data": "num_steps"}

    state_dim: int
    learn_emission: bool = True
    markov: bool = False


class GPSSM(LatentInputModel):
    """GP state-space model x_{t+1} = f(x_t) + ε, y_t = C x_t + d + ν for one sequence Y [T, P]
    (rows are time steps) with a Q-dimensional state and M inducing points in state space.

    f has one GP per state dimension (shared `kernel`, default squared exponential with ARD
    lengthscales, and shared inducing inputs); ε ~ N(0, diag q), ν ~ N(0, diag R), x_0 ~
    N(0, I). `emission=C` [P, Q] fixes the emission (offset d = 0; e.g. C = I when the states
    are observed with noise; a number or a vector where P or Q is 1), otherwise C and d are
    learned from a PCA start. The states' q(x_t) = N(μ_t, diag S_t) start at the PCA scores
    (or `C`'s least-squares states); with `markov=True` (default) each state dimension is a
    Gauss–Markov chain in time with lag-one correlations ρ_t = tanh(`X_coupling`_t)
    (starting at 0), as Frigola et al. (2014)'s q(x); `markov=False` is the mean-field
    q(x) = Π_t N(μ_t, diag S_t).
    `fit()` maximises the bound with q(u) collapsed (L-BFGS-B) or, with `batch_size`, on
    minibatches of transitions with an explicit q(u) (natural gradients) and Adam.
    `transition(X)` gives q(f(X)); `forecast(steps)` samples trajectories beyond the data.
    Shapes: Y [T, P] -> `state_mean` [T, Q]; `transition(X [N*, Q])` -> mean, var `[N*, Q]`;
    `forecast(k)` -> mean, var [k, P] and samples [num_samples, k, P].

    >>> import numpy as np, sparsegp as sg
    >>> x = [0.5]
    >>> for _ in range(59): x.append(0.8 * np.sin(2 * x[-1]) + 0.05 * np.random.randn())
    >>> m = sg.GPSSM(np.array(x)[:, None], state_dim=1, inducing_points=8, emission=[[1.0]])
    >>> _ = m.fit(maxiter=50); mean, var = m.transition(np.linspace(-1, 1, 5)[:, None])
    """

    spec: GPSSMSpec
    spec_type: ClassVar[type[ModelSpec]] = GPSSMSpec
    X_mean: Tensor  # parameters: the means of q(x_t) [T, Q] and the emission C [P, Q], d [P]
    X_coupling: Tensor  # atanh of the lag-one correlations of q(x) [T − 1, Q] (markov=True)
    C: Tensor
    d: Tensor

    def __init__(self, Y: ArrayLike, state_dim: int = 1, inducing_points: InducingLike = None,
                 kernel: Kernel | None = None, *, emission: Any = None,
                 process_noise: Any = None, emission_noise: Any = None, markov: bool = True,
                 jitter: float = DEFAULT_JITTER, chunk_size: int | None = None,
                 seed: int = 0, dtype: torch.dtype | None = None) -> None:
        dtype = model_dtype(Y, None, dtype)
        Y = outputs(Y, "Y", 3)
        T, P = Y.shape
        Q = positive_int(state_dim, "state_dim")
        kernel = checked_kernel(kernel, Q)
        if emission is None:
            mu = pca_latents(Y, Q, seed)
            C = torch.linalg.lstsq(mu, Y - Y.mean(0)).solution.mT  # Y − ȳ ≈ μ Cᵀ
            d = Y.mean(0)
        else:
            C = check_finite(as_tensor(emission, "emission"), "emission").to(Y)
            if C.dim() < 2 and C.numel() == P * Q and min(P, Q) == 1:  # a number or a vector
                C = C.reshape(P, Q)  # is the one column (Q = 1) or row (P = 1) of C
            if tuple(C.shape) != (P, Q):
                raise ValueError(f"emission must be a matrix C of shape ({P}, {Q}) [outputs, "
                                 f"state_dim]; got {tuple(C.shape)}")
            d = torch.zeros_like(Y[0])
            mu = torch.linalg.lstsq(C, Y.mT).solution.mT  # least-squares states
        feature = inducing_inputs(inducing_points, mu[:-1], Q, min(T - 1, 20), seed,
                                  "starting latent states (transitions)")
        spec = GPSSMSpec(num_data=T, output_dim=P, state_dim=Q,
                         learn_emission=emission is None, markov=check_bool(markov, "markov"),
                         jitter=check_jitter(jitter), chunk_size=check_chunk_size(chunk_size),
                         dtype=dtype_name(dtype))
        check_output_scale(float(Y.var(0).mean()) or 1.0, emission_noise is None, "GPSSM")
        self._construct(spec, {"kernel": kernel.to(Y.device), "feature": feature.to(Y.device)})
        self.y = Y
        with torch.no_grad():
            self.C.copy_(C)
            self.d.copy_(d)
        state_var = float(mu.var(0).mean()) or 1.0
        self.kernel.initialise_from_data(mu, state_var)
        self.set_value("X_mean", mu)
        self.set_value("X_variance", torch.full((T, Q), 0.05 * state_var))
        self.set_value("process_noise", torch.full((Q,), 0.1 * state_var) if process_noise is None
                       else one_or_per(process_noise, Q, "process_noise", "state dimension"))
        resid = Y - mu @ C.mT - d
        self.set_value("emission_noise", (resid.var(0) + 0.01 * Y.var(0)).clamp_min(1e-4)
                       if emission_noise is None
                       else one_or_per(emission_noise, Y.shape[1], "emission_noise", "output"))

    def _declare(self, spec: ModelSpec, parts: Parts) -> None:
        assert isinstance(spec, GPSSMSpec)
        self._declare_parts(parts)
        T, P, Q = spec.num_data, spec.output_dim, spec.state_dim
        self._add_free("X_mean", torch.zeros(T, Q, dtype=PARAMETER_DTYPE))
        self._add_positive("X_variance", torch.ones(T, Q, dtype=PARAMETER_DTYPE),
                           POSITIVE_FLOOR, max_dim=2)
        if spec.markov:  # models saved before the Markov q(x) are mean-field
            self._add_free("X_coupling", torch.zeros(T - 1, Q, dtype=PARAMETER_DTYPE))
        self._add_positive("process_noise", torch.ones(Q, dtype=PARAMETER_DTYPE), NOISE_FLOOR)
        self._add_positive("emission_noise", torch.ones(P, dtype=PARAMETER_DTYPE), NOISE_FLOOR)
        self._add_free("C", torch.zeros(P, Q, dtype=PARAMETER_DTYPE))
        self._add_free("d", torch.zeros(P, dtype=PARAMETER_DTYPE))
        if not spec.learn_emission:
            self.freeze("C", "d")

    # -- what users read ------------------------------------------------------------------
    @property
    def state_mean(self) -> np.ndarray:
        """μ [T, Q]: the means of q(x_t)."""
        return as_user_array(self.X_mean)

    @property
    def state_variance(self) -> np.ndarray:
        return as_user_array(self.value("X_variance"))

    @property
    def state_correlation(self) -> np.ndarray:
        """ρ [T − 1, Q]: the correlation of x_t and x_{t+1} under q(x) (zeros if mean-field)."""
        rho = self._coupling()[0]
        T, Q = self.X_mean.shape
        return as_user_array(self.X_mean.new_zeros(T - 1, Q) if rho is None else rho)

    @property
    def markov(self) -> bool:
        """Whether q(x) is a Gauss–Markov chain in time (else mean-field)."""
        return self.spec.markov

    @property
    def process_noise(self) -> np.ndarray:
        return as_user_array(self.value("process_noise"))

    @property
    def emission_noise(self) -> np.ndarray:
        return as_user_array(self.value("emission_noise"))

    @property
    def emission(self) -> tuple[np.ndarray, np.ndarray]:
        """(C [P, Q], d [P])."""
        return as_user_array(self.C), as_user_array(self.d)

    # -- the bound ------------------------------------------------------------------------
    def _coupling(self) -> tuple[Tensor, Tensor] | tuple[None, None]:
        """(ρ, log(1 − ρ²)) [T − 1, Q] of the Markov q(x); (None, None) if mean-field."""
        return coupling(self.X_coupling) if self.markov else (None, None)

    def _transitions(self, steps: Tensor | None = None) -> PsiSums:
        return transition_sums(self.kernel, self.feature.Z, self.X_mean,
                               self.value("X_variance"), steps, rho=self._coupling()[0],
                               chunk_size=self.spec.chunk_size)

    def _step_terms(self, steps: Tensor) -> Tensor:
        """Emission of the states t + 1 and the entropy of q(x_{t+1} | x_t) for the transitions
        t in `steps`."""
        rows = steps + 1
        S = self.value("X_variance")[rows]
        log1m = self._coupling()[1]
        return (emission_term(self._outputs()[rows], self.X_mean[rows], S, self.C, self.d,
                              self.value("emission_noise"))
                + chain_entropy(S, None if log1m is None else log1m[steps]))

    def _first(self) -> Tensor:
        """E log p(x_0) + the emission of y_0 + the entropy of q(x_0)."""
        mu, S = self.X_mean[:1], self.value("X_variance")[:1]
        return (initial_term(mu[0], S[0]) + entropy(S)
                + emission_term(self._outputs()[:1], mu, S, self.C, self.d, self.value("emission_noise")))

    def elbo(self) -> Tensor:
        """The bound with q(u) at its optimum (collapsed), differentiable."""
        self._require_data()
        L, _ = Kuu_cholesky(self.feature, self.kernel, self.jitter)
        steps = torch.arange(self.spec.num_data - 1, device=self.device)
        return (self._first() + self._step_terms(steps)
                + data_bound(self._transitions(), L, self.value("process_noise")))

    def evaluation_work(self) -> float:
        T, M, Q = self.spec.num_data, self.num_inducing, self.spec.state_dim
        return float(T * M * M * Q + M**3)

    def _q_statistics(self) -> tuple[PsiSums, Tensor]:
        return self._transitions(), self.value("process_noise")

    def _output_columns(self) -> int:
        return self.spec.state_dim  # the transition predicts the next state

    def _observation_noise(self) -> Tensor:
        return self.value("process_noise")  # x_{t+1} = f(x_t) + ε

    def _minibatches(self) -> nn.Module:
        return _MinibatchTransitions(self)

    # -- transition and forecasts ---------------------------------------------------------
    def _states_input(self, X: ArrayLike) -> Tensor:
        """States X [N*, Q] as a checked tensor on the model's device."""
        Q = self.spec.state_dim
        X = check_finite(as_tensor(X, "X"), "X").to(PARAMETER_DTYPE)
        if X.dim() != 2 or X.shape[1] != Q:
            raise ValueError(f"X must have shape [N*, {Q}] (state_dim columns); got "
                             f"{tuple(X.shape)}")
        return X.to(self.device)

    input_name = "X"  # states

    @property
    def input_dim(self) -> int:
        return int(self.spec.state_dim)

    def transition(self, X: ArrayLike) -> tuple[Any, Any]:
        """Mean and variance [N*, Q] of f(x) under q(f) at states X [N*, Q] (`predict_f`:
        `predict_y` adds the process noise, the predictive of x_{t+1} given x_t = X)."""
        return self.predict_f(X)

    def sample_posterior(self, num_samples: int = 200, *, burn_in: int = 100,
                         particles: int = 20, seed: int = 0, progress: bool | None = None
                         ) -> PosteriorSamples:
        """Draws from the exact posterior of the states and of u under the approximating
        process (particle Gibbs with ancestor sampling, `objectives/latent/particle_gibbs.py`), with the
        kernel, inducing inputs, noises and emission held at the model's values (fit first).
        No variational factorisation: compare `samples.transition(X)` and
        `samples.state_mean` with `transition(X)` and `state_mean`. Starts from q(x)'s means;
        `burn_in` sweeps are discarded; `particles` ≥ 2 per sweep (more for long sequences:
        watch `samples.acceptance`)."""
        self._require_data()
        num_samples, burn_in = positive_int(num_samples, "num_samples"), int(burn_in)
        if burn_in < 0:
            raise ValueError(f"burn_in must be a non-negative integer; got {burn_in}")
        if isinstance(particles, bool) or not isinstance(particles, int) or particles < 2:
            raise ValueError(f"particles must be an integer ≥ 2; got {particles!r}")
        with torch.no_grad():
            L, _ = Kuu_cholesky(self.feature, self.kernel, self.jitter)
            emission = Emission(self.C.detach(), self.d.detach(),
                                self.value("emission_noise").detach())
            Z, q = self.feature.Z.detach(), self.value("process_noise").detach()
            with progress_bar(progress, burn_in + num_samples, "particle Gibbs") as bar:
                samples = particle_gibbs(self._outputs(), emission, self.kernel, Z, L, q,
                                         self.X_mean.detach(), num_samples, burn_in,
                                         particles, seed, lambda: bar.update(1))
        return PosteriorSamples(samples, self.kernel, Z, L, self._out, self._states_input)

    def forecast(self, steps: int, num_samples: int = 200, seed: int = 0
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """k-step predictions beyond the data: (mean [k, P], variance [k, P], samples
        [num_samples, k, P]) of y_{T}, …, y_{T+k−1}, from trajectories that start at q(x_{T−1}),
        draw u ~ q(u) once per trajectory and then, per step, f(x) ~ p(f | u) (its own
        residual each step: the approximating process), the process and the emission noise."""
        steps = positive_int(steps, "steps")
        num_samples = positive_int(num_samples, "num_samples")
        if num_samples < 2:
            raise ValueError("num_samples must be at least 2 (the variance is estimated from "
                             f"the trajectories); got {num_samples}")
        post = self.posterior()
        g = seeded_generator(seed)

        def normal(*shape: int) -> Tensor:
            return torch.randn(*shape, generator=g, dtype=PARAMETER_DTYPE).to(self.device)

        with torch.no_grad():
            Q = self.spec.state_dim
            L_B = post.q.root if post.q.root.dim() == 3 else post.q.root.expand(Q, -1, -1)
            # v_j = m_j + L_B,j⁻ᵀ ε has covariance B_j⁻¹ (q is stored by its precision root)
            eps = normal(Q, L_B.shape[-1], num_samples)
            v = post.q.mean.mT[..., None] + torch.linalg.solve_triangular(L_B.mT, eps, upper=True)
            x = self.X_mean[-1] + self.value("X_variance")[-1].sqrt() * normal(num_samples, Q)
            q_sd, r_sd = self.value("process_noise").sqrt(), self.value("emission_noise").sqrt()
            out = []
            for _ in range(steps):
                a = torch.linalg.solve_triangular(post.L, Kuf(self.feature, self.kernel, x),
                                                  upper=False)
                f = torch.einsum("ms,jms->sj", a, v)
                resid = (self.kernel.K_diag(x) - (a * a).sum(0)).clamp_min(0.0)
                x = f + resid.sqrt()[:, None] * normal(num_samples, Q) + q_sd * normal(num_samples, Q)
                out.append(x @ self.C.mT + self.d + r_sd * normal(num_samples, r_sd.shape[0]))
            samples = torch.stack(out, 1)
        return self._out(samples.mean(0)), self._out(samples.var(0)), self._out(samples)


class _MinibatchTransitions(nn.Module):
    """The GPSSM bound on minibatches of transitions t → t + 1 with an explicit q(v_j) per
    state dimension, for `training.fit_minibatch` (its `X` are transition indices):
    (first terms) + (T−1)/B Σ_{t ∈ batch} (transition + emission and entropy of x_{t+1}) − KL."""

    def __init__(self, model: GPSSM) -> None:
        super().__init__()
        self.model = model
        self.display_name = type(model).__name__
        with torch.no_grad():
            L, _ = Kuu_cholesky(model.feature, model.kernel, model.jitter)
            q = optimal_q(model._transitions(), L, model.value("process_noise"))
            root = torch.linalg.cholesky(q.covariance)
        Q = model.spec.state_dim
        self.q_mu = nn.Parameter(q.mean.clone())
        self.q_sqrt = nn.Parameter(root.expand(Q, *root.shape[-2:]).clone())
        self.num_data = model.spec.num_data - 1
        self.X = torch.arange(self.num_data, device=model.device)
        self.y = self.X  # unused: the batches are indices

    def elbo(self, steps: Tensor, _: Tensor, q_mu: Tensor | None = None,
             q_sqrt: Tensor | None = None) -> Tensor:
        m = self.model
        L = Kuu_cholesky(m.feature, m.kernel, m.jitter)[0]
        q = WhitenedGaussian(self.q_mu if q_mu is None else q_mu,
                             (self.q_sqrt if q_sqrt is None else q_sqrt).tril())
        batch = (uncollapsed_data_term(m._transitions(steps), L, m.value("process_noise"), q)
                 + m._step_terms(steps))
        return m._first() + self.num_data / steps.shape[0] * batch - whitened_kl(q)

    def forward(self, steps: Tensor, y: Tensor) -> Tensor:
        return -(self.elbo(steps, y) + self.model.log_prior())

    def log_prior(self) -> Tensor:
        return self.model.log_prior()
