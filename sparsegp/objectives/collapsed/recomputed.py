"""Chunked sums whose per-chunk values are a differentiable torch function, recomputed under autograd
in the backward pass (block Power EP, per-point noise).

A subclass gives `sums(L, Xb, yb, *extra)` -> ([A c; cᵀ s_y] as one (M + 1)×(M + 1) matrix,
s_loglam, s_d, s_pen) for one chunk, differentiable in the kernel's and the feature's
parameters, in L = chol(Kuu) and in the floating-point columns (y, a per-point noise). The
outputs are laid out as `statistics.PowerEPSums`'s. The backward pass recomputes each
chunk's sums with those as autograd leaves and pulls the output gradients back through them:
memory stays that of one chunk, the cost about three forward evaluations.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import torch
from torch import Tensor

from ...kernels.base import Kernel
from ..chunked import ChunkedSums


class RecomputedSums(ChunkedSums):
    """Sums by `sums`, gradients by recomputing them per chunk (module docstring)."""

    def __init__(self, feature: Any, kernel: Kernel, L: Tensor) -> None:
        self.feature, self.kernel = feature, kernel
        self.params = tuple(t for t in (*feature.parameters(), *kernel.parameters())
                            if t.requires_grad)
        self.inputs = (*self.params, L)
        self.M = feature.num_inducing
        self.L = L.detach()

    @abstractmethod
    def sums(self, L: Tensor, Xb: Tensor, yb: Tensor, *extra: Tensor
             ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """One chunk's ([A c; cᵀ s_y], s_loglam, s_d, s_pen), differentiable."""

    def zeros(self) -> list[Tensor]:
        z = self.L.new_zeros
        return [z(self.M + 1, self.M + 1), z(()), z(()), z(())]

    def add(self, acc: list[Tensor], Xb: Tensor, yb: Tensor, *extra: Tensor) -> None:
        for total, part in zip(acc, self.sums(self.L, Xb, yb, *extra)):
            total.add_(part)

    def finish(self, acc: list[Tensor]) -> tuple[Tensor, ...]:
        AA, M = acc[0], self.M
        return AA[:M, :M].clone(), AA[M, :M].clone(), AA[M, M].clone(), acc[1], acc[2], acc[3]

    def grad_chunk(self, gacc: list, Xb: Tensor, yb: Tensor, *rest: Any
                   ) -> tuple[Tensor | None, ...]:
        *extra, grads = rest
        gA, gc, gsy, gsl, gsd, gsp = grads
        want = self.want_columns or (False,) * (1 + len(extra))
        with torch.enable_grad():
            L = self.L.clone().requires_grad_(self.inputs[-1].requires_grad)
            columns = [c.detach().clone().requires_grad_(w) for c, w in zip((yb, *extra), want)]
            AA, log_det, d_sum, pen = self.sums(L, Xb, *columns)
            M = self.M
            total = ((AA[:M, :M] * gA).sum() + AA[M, :M] @ gc + AA[M, M] * gsy
                     + log_det * gsl + d_sum * gsd + pen * gsp)
            leaves = (*self.params, L, *columns)
            wrt = [t for t in leaves if t.requires_grad]
            found = dict(zip(map(id, wrt), torch.autograd.grad(total, wrt, allow_unused=True)))
        for i, t in enumerate((*self.params, L)):
            g = found.get(id(t))
            if g is not None and gacc[i] is not None:
                gacc[i].add_(g)
        return tuple(found.get(id(c)) for c in columns)
