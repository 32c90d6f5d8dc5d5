"""The chunked Kuf of inducing points under a change-point kernel, by its kernels' own."""

from __future__ import annotations

import torch
from torch import Tensor

from ..features.inducing_points import InducingPoints
from ..kernels.changepoints import ChangePoints
from .chunked import CrossCovariance, cross_covariance
from .inducing_points import Points
from .registry import register


@register("chunked", InducingPoints, ChangePoints)
class ChangePointsCrossCovariance(CrossCovariance):
    """Kuf = Σ_i diag(a_i(Z)) Kuf_i diag(a_i(X)), each region's Kuf_i by its own chunked Kuf
    (`cross_covariance`: the hand-derived one of its kernel where one is registered), and
    K_diag = Σ_i a_i(x)² k_i(x, x), a_i the kernel's sigmoid switches (`ChangePoints`).

    Gradient (G = gK, g = gkdiag): region i's chunked Kuf takes G_i = diag(a_i(Z)) G
    diag(a_i(X)) and g_i = g a_i(X)²; the switches take ∂a_i(Z) = (G ∘ Kuf_i) a_i(X) (summed
    over chunks) and ∂a_i(x_b) = Σ_m a_i(z_m) (G ∘ Kuf_i)_mb + 2 g_b a_i(x_b) k_i(x_b, x_b),
    passed on to the locations, the steepness (and the inducing inputs' column `dim`) by
    autograd through the [P, B] and [P, M] switches alone. Each region's Kuf_i is evaluated
    again in the gradient pass; the inputs shared by the regions (the inducing inputs) are
    listed once and take the sum of their gradients.
    """

    def __init__(self, feature: Points, kernel: ChangePoints,
                 dtype: torch.dtype | None = None) -> None:
        self.changepoints = kernel
        self.parts = [cross_covariance(feature, k, dtype) for k in kernel.kernels]
        self.dtype = dtype or self.parts[0].dtype
        self.num_inducing = feature.Z.shape[0]
        self.width = sum(p.width for p in self.parts)
        own = [p for p in (feature.Z, *kernel.parameters(recurse=False)) if p.requires_grad]
        unique: dict[int, Tensor] = {}
        for t in (*own, *(t for p in self.parts for t in p.inputs)):
            unique.setdefault(id(t), t)
        self.inputs = tuple(unique.values())
        self._slot = {key: i for i, key in enumerate(unique)}
        self._own = tuple(own)
        self._n_states = [len(p.grad_zeros()) for p in self.parts]  # each region's state
        with torch.no_grad():
            self.aZ = self._switches(feature.Z)  # [P, M]
        self.Z = feature.Z

    def _switches(self, X: Tensor) -> Tensor:
        """a_i(x) [P, B] in the objective's dtype."""
        return self.changepoints._activations(X).to(self.dtype)

    @torch.no_grad()
    def value(self, Xb: Tensor, out: Tensor | None = None) -> Tensor:
        Xb = self._cast(Xb)
        aX = self._switches(Xb)
        total: Tensor | None = None
        for i, part in enumerate(self.parts):
            K = part.value(Xb, out if i == 0 else None)
            if not K.is_contiguous():  # a broadcast value (a constant kernel's): not in place
                K = K.contiguous()
            K.mul_(self.aZ[i][:, None]).mul_(aX[i][None, :])
            total = K if total is None else total.add_(K)
        assert total is not None
        return total

    @torch.no_grad()
    def kdiag(self, Xb: Tensor) -> Tensor:
        Xb = self._cast(Xb)
        aX = self._switches(Xb)
        return sum((aX[i] ** 2 * part.kdiag(Xb) for i, part in enumerate(self.parts)),
                   torch.zeros_like(aX[0]))

    def grad_zeros(self) -> list[Tensor]:
        # ∂a(Z) [P, M], ∂ of the own parameters through a(X), then each region's state
        return [torch.zeros_like(self.aZ), *(torch.zeros_like(p) for p in self._own),
                *(s for part in self.parts for s in part.grad_zeros())]

    def grad_chunk(self, state: list[Tensor], Xb: Tensor, K: Tensor, gK: Tensor,
                   gkdiag: Tensor | None) -> None:
        Xb = self._cast(Xb)
        with torch.no_grad():
            aX = self._switches(Xb)
        g_aX = torch.zeros_like(aX)
        start = 1 + len(self._own)
        for i, part in enumerate(self.parts):
            with torch.no_grad():
                Ki = part.value(Xb)
            P = gK * Ki
            state[0][i].add_(P @ aX[i])
            g_aX[i] = self.aZ[i] @ P
            gKi = P.copy_(gK).mul_(self.aZ[i][:, None]).mul_(aX[i][None, :])
            gkd = None
            if gkdiag is not None:
                gkd = gkdiag.to(self.dtype) * aX[i] * aX[i]
                g_aX[i] += 2.0 * gkdiag.to(self.dtype) * aX[i] * part.kdiag(Xb)
            n = self._n_states[i]
            part.grad_chunk(state[start:start + n], Xb, Ki, gKi, gkd)
            start += n
        with torch.enable_grad():
            a = self.changepoints._activations(Xb)
            if not a.requires_grad:  # the switches are fixed
                return
            grads = torch.autograd.grad(a, self._own, g_aX.to(a.dtype), allow_unused=True)
        for s, g in zip(state[1:1 + len(self._own)], grads):
            if g is not None:
                s.add_(g.to(s.dtype))

    def grad_finish(self, state: list[Tensor]) -> list[Tensor]:
        totals: list[Tensor | None] = [None] * len(self.inputs)

        def add(t: Tensor, g: Tensor | None) -> None:
            if g is None:
                return
            j = self._slot[id(t)]
            prev = totals[j]
            totals[j] = g.to(t.dtype) if prev is None else prev + g.to(t.dtype)

        with torch.enable_grad():
            a = self.changepoints._activations(self.Z)
            grads = (torch.autograd.grad(a, self._own, state[0].to(a.dtype), allow_unused=True)
                     if a.requires_grad else (None,) * len(self._own))
        for t, g, s in zip(self._own, grads, state[1:1 + len(self._own)]):
            add(t, s if g is None else g + s)
        start = 1 + len(self._own)
        for part, n in zip(self.parts, self._n_states):
            for t, g in zip(part.inputs, part.grad_finish(state[start:start + n])):
                add(t, g)
            start += n
        return [torch.zeros_like(t) if g is None else g
                for t, g in zip(self.inputs, totals)]
