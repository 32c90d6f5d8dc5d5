"""Posteriors over inducing variables: q(f*) = ∫ p(f* | u) q(u) du of every sparse model
(`SparsePosterior`), of the P outputs of the linear model of coregionalisation
(`CoregionalPosterior`), of independent outputs with a kernel and inducing variables each
(`SeparatePosterior`), and of F fantasies sharing q(v)'s covariance
(`FantasySparsePosterior`)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from .. import covariances as cov
from ..conditionals import (
    WhitenedGaussian,
    conditional,
    coregional_conditional,
    fold,
    folded_conditional,
)
from ..covariances import cross_covariance
from ..kernels.base import Kernel
from ..linalg import solve_lower
from ..runtime.chunking import ChunkBuffers, auto_chunk_size
from ..runtime.transforms import under_transform
from .base import Posterior, frozen, frozen_copy


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
        # an acquisition function through the posterior), nor batched by torch.func's vmap
        differentiable = Xs.requires_grad or self.tracks or under_transform(Xs)
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


class FantasySparsePosterior(SparsePosterior):
    """The collapsed family's posterior with F sets of targets sharing q(v)'s covariance
    (q.mean [M, F]): predictions [B, F] (covariances [F, B, B]) for every F, one included."""

    def _block(self, Xs: Tensor, full_cov: bool, buffers: ChunkBuffers | None = None
               ) -> tuple[Tensor, Tensor]:
        mean, var = super()._block(Xs, full_cov, buffers)
        if mean.dim() == 1:  # one fantasy: SparsePosterior drops the column
            return mean[:, None], (var[None] if full_cov else var[:, None])
        return mean, var
