"""Sums of weighted deltas with any kernel (van der Wilk 2018, §4.4; docs/math.md §8):

  Kuf[m, n] = Σ_c w_mc k(z_mc, x_n),   Kuu[m, m'] = Σ_{c, c'} w_mc w_m'c' k(z_mc, z_m'c'),

from one kernel evaluation on the M·C delta locations; and, for the squared exponential, the
chunked (chunk-at-a-time) Kuf built on the inducing points' hand-derived one: a pass over the
data costs one M·C × B kernel evaluation, memory O(B·M·C + M²).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..features.deltas import SumOfDeltas
from ..kernels.base import Kernel
from ..kernels.stationary import SquaredExponential
from ..runtime.checkpointing import blocked
from ..runtime.config import CHUNK_MEMORY_BYTES, CHUNK_TEMPORARIES
from .chunked import CrossCovariance
from .inducing_points import SquaredExponentialCrossCovariance
from .registry import register


@register("Kuf", SumOfDeltas, Kernel, kernel_subclasses=True)
def _kuf(feature: SumOfDeltas, kernel: Kernel, X: Tensor) -> Tensor:
    M, C = feature.num_inducing, feature.num_deltas
    K = kernel.K(feature.points(), X).reshape(M, C, X.shape[0])
    return torch.einsum("mc,mcn->mn", feature.weights, K)


def _kuu_rows(points: Tensor, block: Tensor, w: Tensor, w_block: Tensor, kernel: Kernel) -> Tensor:
    """Rows of Kuu for a block of b inducing variables: [b, M] from K [b·C, M·C]."""
    b, C = w_block.shape
    K = kernel.K(block.reshape(b * C, -1), points)  # [b·C, M·C]
    Kw = (K.reshape(b * C, -1, C) * w).sum(-1)  # [b·C, M]: Σ_c' w_m'c' k(z_bc, z_m'c')
    return (Kw.reshape(b, C, -1) * w_block[:, :, None]).sum(1)


def _block(feature: SumOfDeltas, kernel: Kernel, i: int, rows: int) -> Tensor:
    w = feature.weights
    return _kuu_rows(feature.points(), feature.Z[i:i + rows], w, w[i:i + rows], kernel)


@register("Kuu", SumOfDeltas, Kernel, kernel_subclasses=True)
def _kuu(feature: SumOfDeltas, kernel: Kernel) -> Tensor:
    """In blocks of rows, each recomputed in the backward pass: memory O(B·M·C + M²) like the
    chunked data pass, never the (M·C)² kernel matrix at once."""
    M, C, Z = feature.num_inducing, feature.num_deltas, feature.Z
    rows = max(1, CHUNK_MEMORY_BYTES // (CHUNK_TEMPORARIES * Z.element_size() * C * M * C))
    if rows >= M:
        return _block(feature, kernel, 0, M)
    K = blocked(lambda i: _block(feature, kernel, i, rows), range(0, M, rows), 0,
                (*feature.parameters(), *kernel.parameters()))
    return 0.5 * (K + K.mT)


class Points:
    """The M·C delta locations seen as inducing points by the points' chunked Kuf."""

    def __init__(self, Z: Tensor) -> None:
        self.Z = Z


@register("chunked", SumOfDeltas, SquaredExponential)
class DeltasCrossCovariance(CrossCovariance):
    """Kuf_b = Σ_c w_mc K(z_mc, X_b) from the squared exponential's fast M·C × B evaluation;
    gradient: ∂w_mc = Σ_b gK_mb K(z_mc, x_b), and the points' VJP with gK_mcb = w_mc gK_mb."""

    def __init__(self, feature: SumOfDeltas, kernel: SquaredExponential,
                 dtype: torch.dtype | None = None) -> None:
        self.inner = SquaredExponentialCrossCovariance(Points(feature.points()), kernel, dtype)
        self.M, self.C = feature.num_inducing, feature.num_deltas
        self.num_inducing, self.width, self.dtype = self.M, self.M * self.C, self.inner.dtype
        self.inputs = (*self.inner.inputs, feature.weights)
        self._w = feature.weights.detach().to(self.dtype)
        self._last: tuple[Tensor, Tensor] | None = None  # (chunk, its M·C × B values)

    def _points_value(self, Xb: Tensor) -> Tensor:
        """K(z_mc, X_b) [M, C, B]; the backward pass reuses the evaluation its value made."""
        if self._last is not None and self._last[0] is Xb:
            return self._last[1]
        Kp = self.inner.value(Xb).view(self.M, self.C, Xb.shape[0])
        self._last = (Xb, Kp)
        return Kp

    def value(self, Xb: Tensor, out: Tensor | None = None) -> Tensor:
        K = torch.einsum("mc,mcb->mb", self._w, self._points_value(Xb))
        return K if out is None else out.copy_(K)

    def kdiag(self, Xb: Tensor) -> Tensor:
        return self.inner.kdiag(Xb)

    def grad_zeros(self) -> list[Any]:
        return [*self.inner.grad_zeros(), torch.zeros_like(self._w)]

    def grad_chunk(self, state: list[Tensor], Xb: Tensor, K: Tensor, gK: Tensor,
                   gkdiag: Tensor | None) -> None:
        Kp = self._points_value(Xb)
        self._last = None
        state[-1].add_(torch.einsum("mb,mcb->mc", gK, Kp))
        gKp = (self._w[:, :, None] * gK[:, None, :]).reshape(self.M * self.C, -1)
        self.inner.grad_chunk(state[:-1], Xb, Kp.reshape(self.M * self.C, -1), gKp, gkdiag)

    def grad_finish(self, state: list[Tensor]) -> list[Tensor]:
        w = self.inputs[-1]
        return [*self.inner.grad_finish(state[:-1]), state[-1].to(w.dtype)]
