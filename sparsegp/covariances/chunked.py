"""Kuf one chunk of data at a time, and its vector-Jacobian product, for the chunked objectives.

`cross_covariance(feature, kernel)` returns an object that evaluates the chunk Kuf_b [M, B]
without autograd and, given the gradient gK of some function of Kuf_b (and gkdiag of
diag Kff), accumulates the gradient with respect to its `inputs`. The generic version
recomputes Kuf_b under autograd (any registered pair); pairs that matter for speed register
a hand-derived version (`register("chunked", ...)`), checked against autograd in the tests.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..kernels.base import Kernel
from .registry import Kuf, lookup_chunked, width


class CrossCovariance:
    """Generic: value by `covariances.Kuf`, gradient by recomputing it under autograd."""

    def __init__(self, feature: Any, kernel: Kernel, dtype: torch.dtype | None = None) -> None:
        self.feature, self.kernel = feature, kernel
        params = (*feature.parameters(), *kernel.parameters())
        self.inputs = tuple(p for p in params if p.requires_grad)
        self.dtype = dtype or (params[0].dtype if params else torch.float64)
        self.num_inducing, self.width = feature.num_inducing, width(feature, kernel)

    def _cast(self, Xb: Tensor) -> Tensor:
        return Xb if Xb.dtype == self.dtype else Xb.to(self.dtype)

    def value(self, Xb: Tensor, out: Tensor | None = None) -> Tensor:
        """Kuf for the chunk Xb [B, D] -> [M, B] (no autograd); written into `out` if given."""
        with torch.no_grad():
            K = Kuf(self.feature, self.kernel, Xb).to(self.dtype)
        if out is None:
            return K
        return out.copy_(K)

    def kdiag(self, Xb: Tensor) -> Tensor:
        """diag Kff for the chunk -> [B]."""
        with torch.no_grad():
            return self.kernel.K_diag(Xb).to(self.dtype)

    def grad_zeros(self) -> list[Tensor]:
        return [torch.zeros_like(p) for p in self.inputs]

    def grad_chunk(self, state: list[Tensor], Xb: Tensor, K: Tensor, gK: Tensor,
                   gkdiag: Tensor | None) -> None:
        """Add the chunk's ∂/∂inputs of ⟨gK, Kuf_b⟩ + ⟨gkdiag, diag Kff_b⟩ to `state`."""
        if not self.inputs:
            return
        with torch.enable_grad():
            outs, gouts = [Kuf(self.feature, self.kernel, Xb)], [gK]
            if gkdiag is not None:
                outs.append(self.kernel.K_diag(Xb))
                gouts.append(gkdiag)
            gouts = [g.to(o.dtype) for g, o in zip(gouts, outs)]
            grads = torch.autograd.grad(outs, self.inputs, gouts, allow_unused=True)
        for s, g in zip(state, grads):
            if g is not None:
                s.add_(g)

    def grad_finish(self, state: list[Tensor]) -> list[Tensor]:
        return state


def cross_covariance(feature: Any, kernel: Kernel, dtype: torch.dtype | None = None
                     ) -> CrossCovariance:
    """The chunked Kuf for this (feature, kernel) pair: a registered fast one or the generic."""
    cls = lookup_chunked(feature, kernel) or CrossCovariance
    return cls(feature, kernel, dtype)
