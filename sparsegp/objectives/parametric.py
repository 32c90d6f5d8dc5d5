"""Bayesian linear regression on a feature map: the evidence of random Fourier features and of
the sparse spectrum GP (docs/math.md §6; Rahimi & Recht 2008, Lázaro-Gredilla et al. 2010).

With features Φ [N, K] (rows φ(x_n)ᵀ), weights w ~ N(0, I) and y = Φw + ε, ε ~ N(0, σ²I):

  log p(y) = log N(y; 0, ΦΦᵀ + σ²I),

which is the collapsed family's DTC form with Qff = ΦΦᵀ and whitened a_n = φ(x_n) (no Kuu:
L = I), so the same statistics and `collapsed.solve` give it in O(N·K²): A = Σ φφᵀ/σ²,
c = Σ y φ/σ², and q(w) = N(L_B⁻ᵀe, B⁻¹). It is the evidence of the parametric model, not a
bound on the GP's. The chunks are recomputed under autograd in the backward pass.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

from .. import distributed
from ..distributed import count_rows
from ..kernels.base import Kernel
from ..moved import former
from .chunked import chunked_sum
from .collapsed.members import Statistics
from .collapsed.recomputed import RecomputedSums


class FeatureMapSums(RecomputedSums):
    """Σ over chunks of ([A c; cᵀ s_y], Σ log σ², 0, 0) for a = φ(x): `basis` is a module
    with `num_inducing` (= K) and `features(X, kernel) -> [K, B]`."""

    # its one extra column: the noise σ²_n of every point
    def sums(self, L: Tensor, Xb: Tensor, yb: Tensor, *extra: Tensor
             ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        (noise,) = extra
        Phi = self.feature.features(Xb, self.kernel).to(L.dtype)  # [K, B]
        noise = noise.to(L.dtype)
        W = torch.cat([Phi, yb.to(L.dtype)[None]], 0) * torch.rsqrt(noise)
        zero = L.new_zeros(())
        return W @ W.mT, torch.log(noise).sum(), zero, zero


class FeatureBasis(Protocol):
    """What `feature_statistics` needs of a basis: K and φ(X) [K, B]."""

    @property
    def num_inducing(self) -> int: ...

    def features(self, X: Tensor, kernel: Kernel) -> Tensor: ...


def feature_statistics(basis: FeatureBasis, kernel: Kernel, X: Tensor, y: Tensor,
                       noise: Tensor, chunk_size: int, sharded: bool = False) -> Statistics:
    """The statistics of Bayesian linear regression on `basis.features` (module docstring);
    `noise` is σ² [] or σ²_n [N]; `sharded`: X, y are this rank's shard of data sharded over a
    process group (the sums are all ranks')."""
    K = basis.num_inducing
    eye = torch.eye(K, dtype=torch.float64, device=X.device)
    sums = FeatureMapSums(basis, kernel, eye)
    if noise.dim() == 0 and sharded:  # one σ² reaching the sums through every rank's rows
        noise = distributed.summed_gradient(noise)
    rows = noise.expand(X.shape[0]) if noise.dim() == 0 else noise
    n = count_rows(X, sharded)
    return Statistics._make((*chunked_sum(sums, X, y, chunk_size, rows, over_ranks=sharded),
                             n))


def __getattr__(name: str) -> object:
    """Former names of this module (`sparsegp.moved`)."""
    return former(__name__, name)
