"""The exact GP's posterior (`ExactPosterior`) and, after conditioning on new observations,
the same with its factor kept in blocks (`ConditionedExactPosterior`)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from ..kernels.base import Kernel
from ..linalg import solve_lower, solve_lower_t
from ..objectives.exact import exact_factors
from ..objectives.online.conditioning import BlockFactor
from ..runtime.chunking import ChunkBuffers, auto_chunk_size
from .base import Posterior, frozen, frozen_copy


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


class ConditionedExactPosterior(ExactPosterior):
    """The exact GP's posterior after conditioning on new observations. Its factor is kept in
    blocks (`objectives.online.conditioning.BlockFactor`: the original posterior's L, shared, and
    the rows conditioning added), so conditioning copies no N×N matrix; `L` (the whole
    factor, read by saving and by pathwise samples) is assembled on first access. `added` is
    the absolute jitter the factor carries on its diagonal (given to every new point). With
    `fantasies` the targets are F sets (a [N, F]): one mean per fantasy [B, F], the shared
    variances repeated [B, F] (covariances [F, B, B]), as the predictions of several outputs
    are laid out."""

    def __init__(self, kernel: Kernel, X: Tensor, factor: BlockFactor, a: Tensor,
                 noise_variance: Tensor, jitter: float, added: float | Tensor,
                 mean: nn.Module | None, fantasies: bool) -> None:
        self._adopt_mean(mean)
        self.kernel = frozen_copy(kernel)
        self.X = frozen(X)
        self.factor = BlockFactor(*(frozen(t) for t in factor))
        self.a = frozen(a)
        self.weights = self.factor.solve_t(self.a)  # (K + σ²I)⁻¹ y
        self.noise_variance = frozen(noise_variance)
        self.jitter = jitter
        self.added = frozen(added) if isinstance(added, Tensor) else added
        self.fantasies = fantasies

    def __getattr__(self, name: str) -> Any:
        if name == "L":  # the whole factor, once (O(N²) memory)
            L = self.factor.dense()
            self.__dict__["L"] = L
            return L
        raise AttributeError(name)

    def _rows_per_chunk(self) -> int:
        return auto_chunk_size(self.X.shape[0], self.factor.L0.element_size(),
                               device=self.factor.L0.device)

    def _block(self, Xs: Tensor, full_cov: bool, buffers: ChunkBuffers | None = None
               ) -> tuple[Tensor, Tensor]:
        Kfs = self.kernel.K(self.X, Xs)  # [N, B]
        mean = Kfs.mT @ self.weights
        V = self.factor.solve(Kfs)
        if full_cov:
            var = self.kernel.K(Xs) - V.mT @ V
        else:
            var = (self.kernel.K_diag(Xs) - (V * V).sum(0)).clamp_min(0.0)
        if not self.fantasies:
            return mean, var
        F = self.a.shape[1]
        return mean, (var.expand(F, -1, -1) if full_cov else var[:, None].expand(-1, F))

    def state(self) -> dict[str, Any]:
        """The factor in its blocks, as held (their memory layouts kept: the loaded posterior
        solves as this one does, to the last bit)."""
        added = self.added if isinstance(self.added, Tensor) else torch.tensor(self.added)
        L0, B, T = self.factor
        return {"X": self.X, "L0": L0, "B": B, "T": T, "a": self.a,
                "noise_variance": self.noise_variance, "jitter": self.jitter, "added": added,
                "fantasies": self.fantasies}

    @classmethod
    def from_state(cls, kernel: Kernel, saved: dict[str, Any], mean: nn.Module | None
                   ) -> ConditionedExactPosterior:
        """The posterior whose `state()` was `saved` (files of sparsegp 0.4.0: the whole
        factor `L`, taken as one block)."""
        factor = (BlockFactor(saved["L0"], saved["B"], saved["T"]) if "L0" in saved
                  else BlockFactor.of(saved["L"]))
        return cls(kernel, saved["X"], factor, saved["a"],
                   saved["noise_variance"], saved["jitter"], saved.get("added", 0.0), mean,
                   bool(saved.get("fantasies", False)))


def exact_posterior(kernel: Kernel, X: Tensor, residual: Tensor, noise_variance: Tensor,
                    jitter: float = 0.0, mean: nn.Module | None = None) -> ExactPosterior:
    """The exact GP's posterior of the residuals y − m(X) at X (one Cholesky of K + σ²I)."""
    f = exact_factors(kernel.K(X), residual, noise_variance, jitter)
    return ExactPosterior(kernel, X, f.L, f.a, noise_variance, f.jitter, mean)


def restore_exact(kernel: Kernel, saved: dict[str, Any], mean: nn.Module | None
                  ) -> ExactPosterior:
    """The exact posterior whose `state()` was `saved` (a conditioned one's included)."""
    if "added" in saved:  # a conditioned model's (its fantasies' layout included)
        return ConditionedExactPosterior.from_state(kernel, saved, mean)
    return ExactPosterior(kernel, saved["X"], saved["L"], saved["a"], saved["noise_variance"],
                          saved["jitter"], mean)
