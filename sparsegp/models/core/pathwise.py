"""Pathwise posterior samples (Wilson et al. 2020, "Efficiently sampling functions from
Gaussian process posteriors"): a posterior sample as a function, evaluable at any later input.

Matheron's rule writes a posterior sample as a prior sample plus an update: f_s(·) = f_prior(·)
+ k(·, u) Kuu⁻¹ (u_s − u_prior) with u_s ~ q(u) and u_prior the inducing variables of that same
prior sample — f_prior(Z) for inducing points Z, its local averages, weighted sums or windowed
Fourier coefficients for inter-domain features (`pathwise_features`) — for the sparse
posteriors, and f_s(·) = f_prior(·) + k(·, X)(K + σ²I)⁻¹(y − f_prior(X) − ε), ε ~ N(0, σ²I),
for the exact GP. The prior sample is drawn from R random Fourier features of the kernel's
spectral density, f_prior(x) = φ(x)ᵀw with w ~ N(0, I) (`kernels.spectral`), so a sample costs
O(R + M) per new point (O(R + N) for the exact GP) and the same function is evaluated wherever
it is asked — e.g. by an optimiser, one point after another. The update term is exact; the
prior's random features make its covariance an unbiased estimate whose error shrinks as 1/√R.
Near the data, where the posterior variance is a small part of the prior's, that error matters
most: with the squared exponential's Gaussian spectral density the covariance of close points
is estimated well (R = 4000 pairs: variances within a few per cent of the exact ones, tested),
while the heavy-tailed densities of the Matérn kernels (Student t; Cauchy for ν = 1/2) estimate
it poorly — variances near the data off by tens of per cent at R = 4000, still ~5 % at R =
64000. For Matérn kernels near the data, prefer `predict_f_samples` (exact joint samples at
given points). The update multiplies the prior's error by Kuu⁻¹ (or (K + σ²I)⁻¹): badly
conditioned inducing inputs (many per lengthscale, as an unfitted model with a long starting
lengthscale may have) widen it too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from ... import covariances as cov
from ...kernels.base import Kernel
from ...kernels.spectral import feature_map, spectral_samples
from ...linalg import solve_lower, solve_lower_t
from ...posteriors import ExactPosterior, Posterior, SparsePosterior
from ...validation import ArrayLike
from .pathwise_features import inducing_feature_map
from .predictions import Predictive, predicting

#: Random Fourier feature pairs of the prior sample, by default.
DEFAULT_FEATURES = 1024


class PathwiseSamples:
    """S posterior function samples, callable at any inputs: `paths(Xnew)` -> [S, N*]
    (numpy in, numpy out; a tensor in, tensors out, differentiable in Xnew), in the units
    of y, with the model's prior mean. Build with `model.pathwise_samples(...)`."""

    def __init__(self, model: Predictive, posterior: Posterior, num_samples: int, num_features: int,
                 generator: torch.Generator) -> None:
        kernel = posterior.kernel
        D = model.input_dim
        eps = spectral_samples_for(kernel, num_features, D, generator)
        dtype = torch.float64
        self._model = model
        self._kernel = kernel
        self._mean = posterior.mean
        self._omega = (eps.to(model.device) / kernel.value("lengthscale").detach())  # [R, D]
        self._variance = kernel.value("variance").detach()
        self._w = torch.randn(2 * num_features, num_samples, generator=generator,
                              dtype=dtype).to(model.device)  # [2R, S]
        self._cross, self._v = _update(posterior, self._prior, self._prior_inducing,
                                       num_samples, generator)
        self.num_samples = num_samples
        self.num_features = num_features

    def _prior(self, X: Tensor) -> Tensor:
        """f_prior at X [N, D] -> [N, S]."""
        return feature_map(X, self._omega.to(X.dtype), self._variance).mT @ self._w.to(X.dtype)

    def _prior_inducing(self, feature: nn.Module) -> Tensor:
        """The inducing variables u [M, S] of the same prior samples (`pathwise_features`)."""
        psi = inducing_feature_map(feature, self._omega, self._variance)  # [2R, M]
        return psi.mT @ self._w.to(psi.dtype)

    def __call__(self, Xnew: ArrayLike) -> Any:
        with predicting(self._model, Xnew) as call:
            X = call.X
            f = self._prior(X) + self._cross(X) @ self._v  # [N*, S]
            if self._mean is not None:
                f = f + self._mean(X).to(f.dtype)[:, None]
            f = self._model.units.outputs(f, f)[0]  # the units of y
            return call.out(f.mT)[0]


def spectral_samples_for(kernel: Kernel, num: int, dim: int, generator: torch.Generator
                         ) -> Tensor:
    """The spectral draws of a stationary kernel, or a clear error for any other."""
    try:
        return spectral_samples(kernel, num, dim, generator)
    except TypeError:
        raise TypeError(f"pathwise samples draw the prior from random Fourier features, which "
                        f"need a stationary kernel with a known spectral density "
                        f"(SquaredExponential, Matern12, Matern32, Matern52); this model's is "
                        f"{type(kernel).__name__}: use predict_f_samples at the points you "
                        "need") from None


def _absolute_jitter(L: Tensor, jitter: float) -> Tensor:
    """The amount j·mean(diag A) that a factor L of A + j·mean(diag A)·I added to A's
    diagonal (`linalg.jittered_cholesky`): mean(diag L Lᵀ) = (1 + j)·mean(diag A)."""
    return jitter * (L * L).sum(1).mean() / (1.0 + jitter)


def _update(posterior: Posterior, prior: Callable[[Tensor], Tensor],
            prior_inducing: Callable[[nn.Module], Tensor], S: int,
            generator: torch.Generator) -> tuple[Callable[[Tensor], Tensor], Tensor]:
    """(k(·, C) as a function of X [N, D] -> [N, |C|], weights v [|C|, S]) of the update
    term k(·, C) v of Matheron's rule: C the training inputs, or the inducing variables."""
    if isinstance(posterior, ExactPosterior):
        L, X = posterior.L, posterior.X
        # the jitter the factorisation added acts as more noise: L Lᵀ = K + σ²I + jI
        noise = posterior.noise_variance.to(L.dtype) + _absolute_jitter(L, posterior.jitter)
        eps = torch.randn(X.shape[0], S, generator=generator, dtype=L.dtype).to(L.device)
        residual = -(prior(X) + noise.sqrt().reshape(-1, 1) * eps)  # y enters through weights
        v = posterior.weights.reshape(-1, 1) + solve_lower_t(L, solve_lower(L, residual))
        kernel = posterior.kernel
        return (lambda Xs: kernel.K(Xs, X)), v
    if isinstance(posterior, SparsePosterior):
        if posterior.num_latent != 1:
            raise ValueError("pathwise samples take one latent function; this posterior has "
                             f"{posterior.num_latent}")
        L, q, feature, kernel = posterior.L, posterior.q, posterior.feature, posterior.kernel
        M = L.shape[0]
        eps = torch.randn(M, S, generator=generator, dtype=L.dtype).to(L.device)
        root = q.root if q.root.dim() == 2 else q.root[0]
        # v_s ~ q(v) = N(m, S) in the whitened coordinates v = L⁻¹u
        white = q.mean + (solve_lower_t(root, eps) if q.precision else root @ eps)  # [M, S]
        # the prior's u, with the jitter of L Lᵀ = Kuu + jI drawn as well: the posterior
        # that predict_f gives treats u's prior covariance as Kuu + jI
        extra = torch.randn(M, S, generator=generator, dtype=L.dtype).to(L.device)
        u_prior = prior_inducing(feature) + _absolute_jitter(L, posterior.jitter).sqrt() * extra
        v = solve_lower_t(L, white - solve_lower(L, u_prior))  # Kuu⁻¹(u_s − u_prior)
        return (lambda Xs: cov.Kuf(feature, kernel, Xs).mT), v
    raise TypeError(f"pathwise samples are available for the exact GP and for sparse "
                    f"posteriors of one latent function; this model's posterior is "
                    f"{type(posterior).__name__}: use predict_f_samples at the points you need")
