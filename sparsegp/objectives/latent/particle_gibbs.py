"""Particle Gibbs for the GPSSM's approximating process (van der Wilk 2018, §6.3.1; Frigola
et al. 2013; Lindsten, Jordan & Schön 2014).

Given the whitened inducing outputs v = L⁻¹u [M, Q] (L = chol(Kuu), one column per state
dimension, prior N(0, I)), the approximating process makes the states a Markov chain:

  x_{t+1} | x_t, v ~ N(a(x_t)ᵀv, diag(k(x_t, x_t) − ‖a(x_t)‖² + q)),   a(x) = L⁻¹k(Z, x),

the residual of p(f | u) drawn afresh at each step (as in `GPSSM.forecast`); y_t = C x_t + d +
N(0, diag R) and x_0 ~ N(0, I). The sampler alternates two exact conditional updates:

1. x_{0:T−1} | v, y by conditional SMC with ancestor sampling (CSMC-AS): P particles with
   bootstrap proposals, the previous trajectory kept as the reference particle, whose
   ancestor at each step is redrawn ∝ w_{t−1}^i p(x'_t | x_{t−1}^i). It leaves p(x | v, y)
   invariant for any P ≥ 2 (Lindsten et al. 2014).
2. v_j | x (conjugate, per state dimension j): N(P_j⁻¹b_j, P_j⁻¹) with
   P_j = I + Σ_t a_t a_tᵀ/λ_tj, b_j = Σ_t a_t x_{t+1,j}/λ_tj, λ_tj = k_tt − ‖a_t‖² + q_j.

The kernel, Z, the noises and the emission stay at the model's values (fitted by the
variational bound): the samples give the posterior of the states and of f under those,
without the bound's factorisation q(x) q(u). Shapes: y [T, P], C [P, Q], d [P], R [P],
q [Q], states [T, Q], v [M, Q].
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import Tensor

from ... import conditionals
from ...kernels.base import Kernel
from ...linalg import LOG_2PI
from ...runtime.threads import threads_for
from ...validation import ArrayLike, seeded_generator

Transition = Callable[[Tensor], tuple[Tensor, Tensor]]


class Emission(NamedTuple):
    """y_t = C x_t + d + N(0, diag R)."""

    C: Tensor
    d: Tensor
    R: Tensor

    def log_likelihood(self, y: Tensor, x: Tensor) -> Tensor:
        """log N(y; C x + d, diag R) for the particles x [N, Q] -> [N]."""
        r = y - x @ self.C.mT - self.d
        return -0.5 * ((r * r) / self.R + torch.log(self.R) + LOG_2PI).sum(-1)


def _whitened(kernel: Kernel, Z: Tensor, L: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
    """a(x) = L⁻¹k(Z, x) [M, N] and the residual k(x, x) − ‖a(x)‖² [N] of p(f | u)."""
    a = conditionals.whiten(L, kernel.K(Z, x))
    return a, conditionals.nystrom_residual(a, kernel.K_diag(x))


def transition(kernel: Kernel, Z: Tensor, L: Tensor, v: Tensor, q: Tensor) -> Transition:
    """x -> (mean a(x)ᵀv [N, Q], variance k(x, x) − ‖a(x)‖² + q [N, Q]) for states x [N, Q]."""

    def step(x: Tensor) -> tuple[Tensor, Tensor]:
        a, resid = _whitened(kernel, Z, L, x)
        return a.mT @ v, resid[:, None] + q

    return step


def _normal_log_density(x: Tensor, mean: Tensor, var: Tensor) -> Tensor:
    """Σ_q log N(x_q; mean_q, var_q) over the last dimension."""
    return -0.5 * ((x - mean) ** 2 / var + torch.log(var) + LOG_2PI).sum(-1)


def _normalised(log_w: Tensor) -> Tensor:
    return torch.softmax(log_w, 0)


def csmc_as(y: Tensor, emission: Emission, step: Transition, reference: Tensor,
            particles: int, g: torch.Generator) -> Tensor:
    """One conditional-SMC sweep with ancestor sampling: a new trajectory [T, Q] drawn from a
    kernel that leaves p(x_{0:T−1} | v, y) invariant, `reference` [T, Q] being the current
    one (it is the last particle throughout)."""
    T, Q = reference.shape
    dtype = reference.dtype

    def normal(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=g, dtype=dtype, device=g.device)

    x = normal(particles, Q)  # x_0 ~ N(0, I)
    x[-1] = reference[0]
    log_w = emission.log_likelihood(y[0], x)
    paths = [x]
    ancestors = []
    for t in range(1, T):
        W = _normalised(log_w)
        anc = torch.multinomial(W, particles, replacement=True, generator=g)
        mean, var = step(paths[-1])
        # the reference particle's ancestor ∝ w_{t−1}^i p(x'_t | x_{t−1}^i)
        log_as = torch.log_softmax(log_w, 0) + _normal_log_density(reference[t], mean, var)
        anc[-1] = torch.multinomial(_normalised(log_as), 1, generator=g)[0]
        x = mean[anc] + torch.sqrt(var[anc]) * normal(particles, Q)
        x[-1] = reference[t]
        paths.append(x)
        ancestors.append(anc)
        log_w = emission.log_likelihood(y[t], x)
    k = int(torch.multinomial(_normalised(log_w), 1, generator=g)[0])
    out = [paths[-1][k]]
    for t in range(T - 1, 0, -1):
        k = int(ancestors[t - 1][k])
        out.append(paths[t - 1][k])
    return torch.stack(out[::-1])


def v_conditional(kernel: Kernel, Z: Tensor, L: Tensor, states: Tensor, q: Tensor
                  ) -> tuple[Tensor, Tensor]:
    """p(v | x) per state dimension j (module docstring): the means [M, Q] and the lower
    Cholesky factors [Q, M, M] of the precisions P_j."""
    x_prev, x_next = states[:-1], states[1:]
    a, resid = _whitened(kernel, Z, L, x_prev)  # [M, T − 1], [T − 1]
    eye = torch.eye(a.shape[0], dtype=a.dtype, device=a.device)
    means, roots = [], []
    for j in range(states.shape[1]):
        scaled = a / (resid + q[j])
        LP = torch.linalg.cholesky(eye + scaled @ a.mT)
        means.append(torch.cholesky_solve((scaled @ x_next[:, j])[:, None], LP)[:, 0])
        roots.append(LP)
    return torch.stack(means, 1), torch.stack(roots)


def sample_v(kernel: Kernel, Z: Tensor, L: Tensor, states: Tensor, q: Tensor,
             g: torch.Generator) -> Tensor:
    """One draw of v | x [M, Q]: mean + P_j^{−½}ε per column."""
    mean, roots = v_conditional(kernel, Z, L, states, q)
    eps = torch.randn(*roots.shape[:2], 1, generator=g, dtype=mean.dtype, device=g.device)
    return mean + torch.linalg.solve_triangular(roots.mT, eps, upper=True)[..., 0].mT


class GibbsSamples(NamedTuple):
    """Draws of the states [S, T, Q] and of v = L⁻¹u [S, M, Q], and the sweeps' acceptance
    of a new trajectory: the fraction of time steps whose state changed, per sweep [S]."""

    states: Tensor
    v: Tensor
    moved: Tensor


def particle_gibbs(y: Tensor, emission: Emission, kernel: Kernel, Z: Tensor, L: Tensor,
                   q: Tensor, start: Tensor, num_samples: int, burn_in: int, particles: int,
                   seed: int, on_sweep: Callable[[], None] | None = None) -> GibbsSamples:
    """`burn_in` + `num_samples` Gibbs sweeps (v | x, then x | v, y) from the trajectory
    `start` [T, Q]; the last `num_samples` are returned."""
    g = seeded_generator(seed, start.device)
    x = start.clone()
    states, vs, moved = [], [], []
    # many small operations (P particles × M inducing points per step): one thread
    with threads_for(float(particles) * Z.shape[0] ** 2):
        for sweep in range(burn_in + num_samples):
            v = sample_v(kernel, Z, L, x, q, g)
            new = csmc_as(y, emission, transition(kernel, Z, L, v, q), x, particles, g)
            changed = float((new != x).any(-1).double().mean())
            x = new
            if sweep >= burn_in:
                states.append(x)
                vs.append(v)
                moved.append(changed)
            if on_sweep is not None:
                on_sweep()
    return GibbsSamples(torch.stack(states), torch.stack(vs),
                        torch.tensor(moved, dtype=start.dtype))


def predict_transition(samples: GibbsSamples, kernel: Kernel, Z: Tensor, L: Tensor, X: Tensor
                       ) -> tuple[Tensor, Tensor]:
    """Mean and variance [N*, Q] of f(X) over the samples: the spread of a(X)ᵀv_s plus the
    residual of p(f | u) (the law of total variance)."""
    a, resid = _whitened(kernel, Z, L, X)  # [M, N*], [N*]
    f = torch.einsum("mn,smq->snq", a, samples.v)
    return f.mean(0), f.var(0, unbiased=False) + resid[:, None]


def effective_sample_size(chain: Tensor) -> float:
    """The effective size n/τ of a scalar chain [S]: τ = 1 + 2 Σ_k ρ_k summed over pairs
    (ρ_1 + ρ_2), (ρ_3 + ρ_4), … while a pair is positive (Geyer's initial positive sequence;
    autocorrelations by FFT)."""
    x = chain - chain.mean()
    n = x.shape[0]
    if n < 4 or float((x * x).sum()) == 0.0:
        return float(n)
    spectrum = torch.fft.rfft(x, 2 * n)
    acov = torch.fft.irfft(spectrum * spectrum.conj(), 2 * n)[:n]
    rho = acov / acov[0]
    tau = 1.0
    for k in range(1, n - 1, 2):
        pair = float(rho[k] + rho[k + 1])
        if pair <= 0.0:
            break
        tau += 2.0 * pair
    return n / tau


class PosteriorSamples:
    """What `GPSSM.sample_posterior` returns: the draws (numpy, in the model's dtype) and the
    transition's posterior from them. `states` [S, T, Q]; `acceptance` the mean fraction of
    time steps whose state a sweep changed (near 0: the particles are too few for the
    sequence); `effective_sample_size` of the states' mean over time per dimension [Q]."""

    def __init__(self, samples: GibbsSamples, kernel: Kernel, Z: Tensor, L: Tensor,
                 out: Callable[[Tensor], np.ndarray], states_input: Callable[[Any], Tensor]
                 ) -> None:
        self._samples, self._kernel, self._Z, self._L = samples, kernel, Z, L
        self._out, self._states_input = out, states_input
        self.states = out(samples.states)
        self.acceptance = float(samples.moved.mean())
        self.effective_sample_size = np.array(
            [effective_sample_size(samples.states[:, :, j].mean(1))
             for j in range(samples.states.shape[2])])

    @property
    def state_mean(self) -> np.ndarray:
        """[T, Q]: the posterior mean of the states."""
        return self._out(self._samples.states.mean(0))

    @property
    def state_variance(self) -> np.ndarray:
        """[T, Q]: the posterior variance of the states."""
        return self._out(self._samples.states.var(0, unbiased=False))

    def transition(self, X: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """Mean and variance [N*, Q] of f(X) over the samples at states X [N*, Q]."""
        with torch.no_grad():
            mean, var = predict_transition(self._samples, self._kernel, self._Z, self._L,
                                           self._states_input(X))
        return self._out(mean), self._out(var)
