"""Frozen posterior values: the factorisations are computed once, prediction only reads them.

A posterior holds detached copies of the kernel and inducing variables it was built with, so
changing or training the model afterwards never alters it (and never leaves it stale: the
model builds a new one). Prediction is O(M²) per test point for the sparse posterior, in
chunks of test points; no N*×N* matrix exists unless `full_cov=True`.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

import torch
from torch import Tensor, nn

from . import covariances as cov
from .conditionals import (
    WhitenedGaussian,
    conditional,
    coregional_conditional,
    fold,
    folded_conditional,
    with_prior_mean,
)
from .conditionals import projected as conditionals_projected
from .covariances import cross_covariance
from .kernels.base import Kernel
from .linalg import solve_lower, solve_lower_t
from .runtime.chunking import ChunkBuffers, auto_chunk_size, chunk_slices
from .structured.grid import interpolate, interpolated_diag, kuu_matmul

if TYPE_CHECKING:
    from .kernels.stationary import RadialKernel


class FeatureBasis(Protocol):
    """What `FeaturePosterior` needs of a basis of K features (`models.spectral.SpectralBasis`:
    models sit above posteriors, so the type is described here, not imported)."""

    @property
    def num_inducing(self) -> int: ...

    def features(self, X: Tensor, kernel: Kernel) -> Tensor: ...


ModuleT = TypeVar("ModuleT", bound=nn.Module)


#: True while a posterior is built with the graph to the model's parameters (`tracking`).
_TRACKING: ContextVar[bool] = ContextVar("sparsegp_tracking_posterior", default=False)


@contextmanager
def tracking() -> Iterator[None]:
    """Posteriors built inside keep the autograd graph to the model's live parameters (no
    copies, nothing detached), so that predictions are differentiable with respect to them.
    Such a posterior reflects the parameters as they were when it was built; it is not cached.
    """
    token = _TRACKING.set(True)
    try:
        yield
    finally:
        _TRACKING.reset(token)


def frozen(t: Tensor) -> Tensor:
    """t detached from the graph, except while `tracking`."""
    return t if _TRACKING.get() else t.detach()


def frozen_copy(module: ModuleT) -> ModuleT:
    """A deep copy with every parameter detached from training (the module itself while
    `tracking`)."""
    if _TRACKING.get():
        return module
    twin = copy.deepcopy(module)
    twin.requires_grad_(False)
    return twin


class Posterior(ABC):
    """q(f*) at new inputs. Subclasses give the mean and variance for one block of inputs."""

    kernel: Kernel
    noise_variance: Tensor
    mean: nn.Module | None = None  # the prior mean m(x), frozen; None for zero
    tracks: bool = False  # built while `tracking`: the graph to the parameters is kept

    def _adopt_mean(self, mean: nn.Module | None) -> None:
        self.tracks = _TRACKING.get()
        self.mean = None if mean is None else frozen_copy(mean)

    def _shifted(self, Xs: Tensor, mean: Tensor) -> Tensor:
        """The predictive mean plus the prior mean at Xs ([B] or [B, C]; a prior mean of
        [B] is shared by the C columns)."""
        if self.mean is None:
            return mean
        return with_prior_mean(mean, self.mean(Xs).to(mean.dtype))

    @abstractmethod
    def _block(self, Xs: Tensor, full_cov: bool, buffers: ChunkBuffers | None = None
               ) -> tuple[Tensor, Tensor]:
        """Mean and variance (or covariance) of f* at one block of inputs Xs; `buffers`: the
        pass's tensors to reuse for the block's large temporaries (None: fresh ones)."""

    @abstractmethod
    def _rows_per_chunk(self) -> int:
        """Test points per block of `predict_f`, from the memory budget."""

    def predict_f(
        self, Xnew: Tensor, full_cov: bool = False, chunk_size: int | None = None
    ) -> tuple[Tensor, Tensor]:
        """Mean [N*] and variance [N*] (or covariance [N*, N*]) of the latent f*."""
        if full_cov:
            m, v = self._block(Xnew, True)
            return self._shifted(Xnew, m), v
        size = chunk_size or self._rows_per_chunk()
        mean: Tensor | None = None
        var: Tensor | None = None
        buffers = ChunkBuffers()
        for s in chunk_slices(Xnew.shape[0], size):
            m, v = self._block(Xnew[s], False, buffers)
            m = self._shifted(Xnew[s], m)
            if mean is None or var is None:  # both None until the first chunk
                # Outputs allocated once, then filled: many small chunk results kept alive
                # between the large temporaries fragment the heap (measured: RSS grew by one
                # B×M block per chunk).
                mean = m.new_empty((Xnew.shape[0], *m.shape[1:]))
                var = v.new_empty((Xnew.shape[0], *v.shape[1:]))
            mean[s], var[s] = m, v
        if mean is None or var is None:
            empty = Xnew.new_zeros(0)
            return empty, empty
        return mean, var

    def predict_y(
        self, Xnew: Tensor, full_cov: bool = False, chunk_size: int | None = None
    ) -> tuple[Tensor, Tensor]:
        """Predictive mean and variance (or covariance) of noisy observations y*."""
        if self.noise_variance.dim() > 0:
            raise ValueError("the noise of this posterior differs per training point: add the "
                             "noise of the new points to predict_f's variance yourself (the "
                             "models' predict(..., noise_variance=...) does)")
        mean, var = self.predict_f(Xnew, full_cov, chunk_size)
        if full_cov:
            eye = torch.eye(var.shape[0], dtype=var.dtype, device=var.device)
            return mean, var + self.noise_variance * eye
        return mean, var + self.noise_variance

    @abstractmethod
    def state(self) -> dict[str, Any]:
        """The tensors that define this posterior (for saving)."""


class SparsePosterior(Posterior):
    """q(f*) = ∫ p(f* | u) q(u) du for inducing variables u (every sparse model):

    q(v) = N(m, S) for v = L⁻¹u, L = chol(Kuu), and the conditional of `conditionals.py` gives
    mean a*ᵀm and variance k** − ‖a*‖² + a*ᵀSa*, a* = L⁻¹k_u* (folded once into operators
    so that a block of test points costs one matrix product). For the collapsed family and
    Power EP S = B⁻¹ (docs/math.md §2, §5), for SVGP S is the variational covariance (§4).
    Shapes: q.mean [M, C]; predictions [N*] for one latent function, [N*, C] for several.
    """

    def __init__(self, kernel: Kernel, feature: nn.Module, L: Tensor, q: WhitenedGaussian,
                 noise_variance: Tensor, jitter: float = 0.0, mean: nn.Module | None = None
                 ) -> None:
        self._adopt_mean(mean)
        self.kernel = frozen_copy(kernel)
        self.feature = frozen_copy(feature)
        self.L = frozen(L)
        self.q = WhitenedGaussian(frozen(q.mean), frozen(q.root), bool(q.precision))
        # prediction: one product per block, no solves; a posterior that keeps the graph to
        # the parameters solves instead (the eigendecomposition of I − S that folding takes
        # has no derivative where eigenvalues repeat, e.g. at q(v) = the prior)
        self._folded = None if self.tracks else fold(self.L, self.q)
        self._kuf = cross_covariance(self.feature, self.kernel)  # fast chunk evaluation
        self.noise_variance = frozen(noise_variance)
        self.jitter = jitter

    @property
    def num_latent(self) -> int:
        return self.q.mean.shape[1]

    def _rows_per_chunk(self) -> int:
        M = self.L.shape[0]
        return auto_chunk_size(self._kuf.width + M * self.num_latent, self.L.element_size(),
                               device=self.L.device)

    def _block(self, Xs: Tensor, full_cov: bool, buffers: ChunkBuffers | None = None
               ) -> tuple[Tensor, Tensor]:
        # the streamed evaluation is faster but not differentiable in Xs (e.g. for optimising
        # an acquisition function through the posterior)
        differentiable = Xs.requires_grad or self.tracks
        if differentiable:
            Kus = cov.Kuf(self.feature, self.kernel, Xs)
        else:
            shape = (self._kuf.num_inducing, Xs.shape[0])
            Kus = self._kuf.value(Xs, None if buffers is None else buffers.get(
                "Kus", shape, self._kuf.dtype, Xs.device))
        kff = self.kernel.K(Xs) if full_cov else self.kernel.K_diag(Xs)
        Kus = Kus.to(self.L.dtype)
        if self._folded is None:
            mean, var = conditional(solve_lower(self.L, Kus), kff, self.q, full_cov)
        else:
            V = None if buffers is None or differentiable else buffers.get(
                "V", (self._folded.F.shape[0], *Kus.shape), Kus.dtype, Kus.device)
            mean, var = folded_conditional(Kus, kff, self._folded, full_cov, out=V)
        if self.num_latent == 1:
            return mean[:, 0], (var[0] if full_cov else var[:, 0])
        # outputs sharing one q(v) covariance (the collapsed family's P outputs) share F
        C = self.num_latent
        return mean, (var.expand(C, -1, -1) if full_cov else var.expand(-1, C))

    @property
    def q_mu(self) -> Tensor:
        """Mean of q(u) = L m. Shape [M, C]."""
        return self.L @ self.q.mean

    @property
    def q_cov(self) -> Tensor:
        """Covariance of q(u) = L S Lᵀ. Shape [C, M, M]."""
        return self.L @ self.q.covariance @ self.L.mT

    def state(self) -> dict[str, Any]:
        return {"L": self.L, "q_mean": self.q.mean, "q_root": self.q.root,
                "q_precision": self.q.precision, "noise_variance": self.noise_variance,
                "jitter": self.jitter}

    @classmethod
    def from_state(cls, kernel: Kernel, feature: nn.Module, saved: dict[str, Any],
                   mean: nn.Module | None = None) -> SparsePosterior:
        """The posterior whose `state()` was `saved` (the model's prior mean, if any)."""
        q = WhitenedGaussian(saved["q_mean"], saved["q_root"], bool(saved["q_precision"]))
        return cls(kernel, feature, saved["L"], q, saved["noise_variance"], saved["jitter"], mean)


class CoregionalPosterior(Posterior):
    """q(f*) of the P outputs f = W g of the linear model of coregionalisation with the
    collapsed bound's optimal q(v) over the L·M inducing variables of the L latent functions
    (`conditionals.coregional_conditional`). Predictions [N*, P]; covariances over the points
    [P, N*, N*] (`full_cov`); `predict_output_cov` gives the [P, P] covariance at each point."""

    def __init__(self, kernel: Kernel, feature: nn.Module, L: Tensor, q: WhitenedGaussian,
                 mixing: Tensor, noise_variance: Tensor, jitter: float = 0.0) -> None:
        self.mean = None
        self.kernel = frozen_copy(kernel)
        self.feature = frozen_copy(feature)
        self.L = frozen(L)
        self.q = WhitenedGaussian(frozen(q.mean), frozen(q.root), True)
        self.mixing = frozen(mixing)
        self.noise_variance = frozen(noise_variance)
        self.jitter = jitter

    def _rows_per_chunk(self) -> int:
        M, P, Lat = self.L.shape[0], *self.mixing.shape
        return auto_chunk_size(M * Lat * (Lat + P) + M, self.L.element_size(), device=self.L.device)

    def _whitened(self, Xs: Tensor) -> Tensor:
        return solve_lower(self.L, cov.Kuf(self.feature, self.kernel, Xs).to(self.L.dtype))

    def _block(self, Xs: Tensor, full_cov: bool, buffers: ChunkBuffers | None = None
               ) -> tuple[Tensor, Tensor]:
        kff = self.kernel.K(Xs) if full_cov else self.kernel.K_diag(Xs)
        return coregional_conditional(self.q, self.mixing, self._whitened(Xs), kff, full_cov)

    def predict_output_cov(self, Xs: Tensor) -> tuple[Tensor, Tensor]:
        """Mean [N*, P] and the covariance of the P outputs at each point [N*, P, P]."""
        return coregional_conditional(self.q, self.mixing, self._whitened(Xs),
                                      self.kernel.K_diag(Xs), full_output_cov=True)

    def state(self) -> dict[str, Any]:
        return {"L": self.L, "q_mean": self.q.mean, "q_root": self.q.root,
                "mixing": self.mixing, "noise_variance": self.noise_variance,
                "jitter": self.jitter}

    @classmethod
    def from_state(cls, kernel: Kernel, feature: nn.Module, saved: dict[str, Any]
                   ) -> CoregionalPosterior:
        q = WhitenedGaussian(saved["q_mean"], saved["q_root"], True)
        return cls(kernel, feature, saved["L"], q, saved["mixing"], saved["noise_variance"],
                   saved["jitter"])


class SeparatePosterior(Posterior):
    """Independent outputs with a kernel and inducing variables each (`kernels.Separate`): one
    `SparsePosterior` per output, predictions side by side — mean [N*, P], variances [N*, P]
    or covariances [P, N*, N*]."""

    def __init__(self, parts: list[SparsePosterior], noise_variance: Tensor,
                 mean: nn.Module | None = None) -> None:
        self._adopt_mean(mean)  # a prior mean shared by every output (SVGP's latent functions)
        self.parts = parts
        self.noise_variance = frozen(noise_variance)

    def _rows_per_chunk(self) -> int:
        return min(part._rows_per_chunk() for part in self.parts)

    def _block(self, Xs: Tensor, full_cov: bool, buffers: ChunkBuffers | None = None
               ) -> tuple[Tensor, Tensor]:
        means, variances = zip(*(part._block(Xs, full_cov, buffers) for part in self.parts))
        return torch.stack(means, -1), torch.stack(variances, 0 if full_cov else -1)

    def state(self) -> dict[str, Any]:
        out: dict[str, Any] = {"noise_variance": self.noise_variance, "parts": len(self.parts)}
        for p, part in enumerate(self.parts):
            out.update({f"part{p}.{key}": value for key, value in part.state().items()})
        return out

    @classmethod
    def from_state(cls, pairs: list[tuple[Any, Kernel]], saved: dict[str, Any],
                   mean: nn.Module | None = None) -> SeparatePosterior:
        """The posterior whose `state()` was `saved`, from (feature, kernel) of every output."""
        parts = []
        for p, (feature, kernel) in enumerate(pairs):
            prefix = f"part{p}."
            state = {k[len(prefix):]: v for k, v in saved.items() if k.startswith(prefix)}
            parts.append(SparsePosterior.from_state(kernel, feature, state))
        return cls(parts, saved["noise_variance"], mean)


class ExactPosterior(Posterior):
    """p(f* | y) of the exact GP (Rasmussen & Williams 2006, eqs. 2.25–2.26):

    mean = m(X*) + K*f (K + σ²I)⁻¹ (y − m(X)), cov = K** − K*f (K + σ²I)⁻¹ Kf*
    (a = L⁻¹(y − m(X)) with a prior mean m).
    """

    def __init__(
        self, kernel: Kernel, X: Tensor, L: Tensor, a: Tensor, noise_variance: Tensor,
        jitter: float = 0.0, mean: nn.Module | None = None,
    ) -> None:
        self._adopt_mean(mean)
        self.kernel = frozen_copy(kernel)
        self.X, self.L = frozen(X), frozen(L)
        self.a = frozen(a)  # L⁻¹y
        self.weights = solve_lower_t(self.L, self.a)  # (K + σ²I)⁻¹ y
        self.noise_variance = frozen(noise_variance)
        self.jitter = jitter

    def _rows_per_chunk(self) -> int:
        return auto_chunk_size(self.X.shape[0], self.L.element_size(), device=self.L.device)

    def _block(self, Xs: Tensor, full_cov: bool, buffers: ChunkBuffers | None = None
               ) -> tuple[Tensor, Tensor]:
        Kfs = self.kernel.K(self.X, Xs)  # [N, B]
        mean = Kfs.mT @ self.weights
        V = solve_lower(self.L, Kfs)
        if full_cov:
            return mean, self.kernel.K(Xs) - V.mT @ V
        return mean, (self.kernel.K_diag(Xs) - (V * V).sum(0)).clamp_min(0.0)

    def state(self) -> dict[str, Any]:
        return {"X": self.X, "L": self.L, "a": self.a,
                "noise_variance": self.noise_variance, "jitter": self.jitter}


class FeaturePosterior(Posterior):
    """f(x) = φ(x)ᵀw with q(w) = N(m, S) (Bayesian linear regression on a feature map: random
    Fourier features, sparse spectrum GP): mean φ*ᵀm, variance φ*ᵀSφ*. `basis.features(X,
    kernel)` gives φ [K, B]."""

    def __init__(self, basis: nn.Module, kernel: Kernel, q: WhitenedGaussian,
                 noise_variance: Tensor, mean: nn.Module | None = None) -> None:
        self._adopt_mean(mean)
        self.basis = cast(FeatureBasis, frozen_copy(basis))  # a module with `FeatureBasis`'s API
        self.kernel = frozen_copy(kernel)
        self.q = WhitenedGaussian(frozen(q.mean), frozen(q.root), bool(q.precision))
        self.noise_variance = frozen(noise_variance)

    def _rows_per_chunk(self) -> int:
        return auto_chunk_size(self.basis.num_inducing, self.q.mean.element_size(),
                               device=self.q.mean.device)

    def _block(self, Xs: Tensor, full_cov: bool, buffers: ChunkBuffers | None = None
               ) -> tuple[Tensor, Tensor]:
        Phi = self.basis.features(Xs, self.kernel).to(self.q.mean.dtype)  # [K, B]
        if full_cov:
            SP = self.q.root_t_times(Phi)[0]  # [K, B]
            return (Phi.mT @ self.q.mean)[:, 0], SP.mT @ SP
        mean, var = conditionals_projected(Phi, self.q)
        return mean[:, 0], var[:, 0]

    def state(self) -> dict[str, Any]:
        return {"q_mean": self.q.mean, "q_root": self.q.root, "q_precision": self.q.precision,
                "noise_variance": self.noise_variance}

    @classmethod
    def from_state(cls, basis: nn.Module, kernel: Kernel, saved: dict[str, Any],
                   mean: nn.Module | None = None) -> FeaturePosterior:
        q = WhitenedGaussian(saved["q_mean"], saved["q_root"], bool(saved["q_precision"]))
        return cls(basis, kernel, q, saved["noise_variance"], mean)


class InterpolatedPosterior(Posterior):
    """p(f* | y) of KISS-GP, the GP with the interpolated kernel W K_UU Wᵀ (Wilson & Nickisch
    2015), read from two grid-sized caches (Pleiss et al. 2018, LOVE):

    mean = w*ᵀ a with a = K_UU Wᵀα, α = A⁻¹y (CG), and var = k̃** − ‖Cᵀw*‖² with
    C = K_UU Wᵀ Q L_T⁻ᵀ from k Lanczos steps A ≈ Q T Qᵀ, T = L_T L_Tᵀ — exact for k = N, an
    over-estimate of the variance (never below it) for k < N. O(4^D (1 + k)) per test point.
    Shapes: a [G], C [G, k] with G = Π G_d.
    """

    kernel: RadialKernel

    def __init__(self, kernel: RadialKernel, start: Tensor, spacing: Tensor, sizes: list[int],
                 a: Tensor, C: Tensor, noise_variance: Tensor, mean: nn.Module | None = None
                 ) -> None:
        self._adopt_mean(mean)
        self.kernel = frozen_copy(kernel)
        self.start, self.spacing, self.sizes = frozen(start), frozen(spacing), list(sizes)
        self.a, self.C = frozen(a), frozen(C)
        self.noise_variance = frozen(noise_variance)

    def _rows_per_chunk(self) -> int:
        return max(1, 2**22 // (4 ** len(self.sizes) * (1 + self.C.shape[1])))

    def _block(self, Xs: Tensor, full_cov: bool, buffers: ChunkBuffers | None = None
               ) -> tuple[Tensor, Tensor]:
        g = interpolate(Xs, self.start, self.spacing, self.sizes)
        mean = g.W @ self.a
        WC = g.W @ self.C
        if full_cov:
            K = g.W @ kuu_matmul(self.kernel, self.spacing, self.sizes)(g.Wt.to_dense())
            return mean, K - WC @ WC.mT
        kdiag = interpolated_diag(self.kernel, g.idx, g.weights, self.spacing, self.sizes)
        return mean, (kdiag - (WC * WC).sum(1)).clamp_min(0.0)

    def state(self) -> dict[str, Any]:
        return {"a": self.a, "C": self.C, "noise_variance": self.noise_variance}

