"""Posteriors of the feature-map models: Bayesian linear regression on a basis
(`FeaturePosterior`: random Fourier features, the sparse spectrum GP) and KISS-GP's
interpolated kernel (`InterpolatedPosterior`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, cast

from torch import Tensor, nn

from ..conditionals import WhitenedGaussian
from ..conditionals import projected as conditionals_projected
from ..kernels.base import Kernel
from ..runtime.chunking import ChunkBuffers, auto_chunk_size
from ..structured.grid import interpolate, interpolated_diag, kuu_matmul
from .base import Posterior, frozen, frozen_copy

if TYPE_CHECKING:
    from ..kernels.stationary import RadialKernel


class FeatureBasis(Protocol):
    """What `FeaturePosterior` needs of a basis of K features (`models.spectral.SpectralBasis`:
    models sit above posteriors, so the type is described here, not imported)."""

    @property
    def num_inducing(self) -> int: ...

    def features(self, X: Tensor, kernel: Kernel) -> Tensor: ...


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

