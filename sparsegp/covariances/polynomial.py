"""The fast chunked Kuf of inducing points under the polynomial kernel."""

from __future__ import annotations

import torch
from torch import Tensor

from ..features.inducing_points import InducingPoints
from ..kernels.polynomial import Polynomial
from .chunked import CrossCovariance
from .inducing_points import Points
from .registry import register


@register("chunked", InducingPoints, Polynomial)
class PolynomialCrossCovariance(CrossCovariance):
    """Kuf = σ² T^p with T = Z Xᵀ + c (c = 0 for the homogeneous kernel): one matrix product
    and p elementwise passes per chunk, K_diag = σ² (‖x‖² + c)^p.

    Gradient (G = gK, g = gkdiag, summed over chunks), with P = p σ² G ∘ T^(p−1) (the chunk's
    T recomputed by the same product): ∂Z = P X, ∂c = Σ P + p σ² Σ_n g_n (‖x_n‖² + c)^(p−1),
    ∂σ² = Σ G ∘ K/σ² + Σ_n g_n (‖x_n‖² + c)^p. Every sum but P X is a scalar, so the chunk
    costs two thin products (T and P X) and a few passes over [M, B].
    """

    def __init__(self, feature: Points, kernel: Polynomial,
                 dtype: torch.dtype | None = None) -> None:
        Z, var = feature.Z, kernel.value("variance")
        offset = kernel.value("offset") if kernel.has_offset else None
        self.inputs = (Z, var) if offset is None else (Z, var, offset)
        self.dtype = dtype or Z.dtype
        self.num_inducing = self.width = Z.shape[0]
        self.degree = kernel.degree
        self.Z = Z.detach().to(self.dtype)
        self.var = var.detach().to(self.dtype)
        self.offset = None if offset is None else offset.detach().to(self.dtype)

    def _base(self, Xb: Tensor, out: Tensor | None = None) -> Tensor:
        """T = Z Xᵀ + c [M, B]."""
        T = torch.mm(self.Z, Xb.mT, out=out)
        return T if self.offset is None else T.add_(self.offset)

    def _diag_base(self, Xb: Tensor) -> Tensor:
        """‖x‖² + c [B]."""
        sq = (Xb * Xb).sum(-1)
        return sq if self.offset is None else sq + self.offset

    def value(self, Xb: Tensor, out: Tensor | None = None) -> Tensor:
        T = self._base(self._cast(Xb), out)
        if self.degree > 1:
            T.pow_(self.degree)
        return T.mul_(self.var)

    def kdiag(self, Xb: Tensor) -> Tensor:
        return self.var * self._diag_base(self._cast(Xb)).pow(self.degree)

    def grad_zeros(self) -> list[Tensor]:
        # Σ P X [M, D], Σ P, Σ G ∘ K and the kdiag term's ∂σ², ∂c
        return [torch.zeros_like(self.Z), *(self.Z.new_zeros(()) for _ in range(4))]

    def grad_chunk(self, state: list[Tensor], Xb: Tensor, K: Tensor, gK: Tensor,
                   gkdiag: Tensor | None) -> None:
        Xb = self._cast(Xb)
        p = self.degree
        state[2].add_(torch.dot(gK.reshape(-1), K.reshape(-1)))
        if p == 1:
            P = gK
        else:
            T = self._base(Xb)
            P = gK.mul_(T.pow_(p - 1) if p > 2 else T)  # gK is scratch: overwritten
        state[0].addmm_(P, Xb)
        state[1].add_(P.sum())
        if gkdiag is not None:
            g = gkdiag.to(self.dtype)
            s = self._diag_base(Xb)
            s_low = s.pow(p - 1)
            state[3].add_(torch.dot(g, s_low * s))
            state[4].add_(torch.dot(g, s_low))

    def grad_finish(self, state: list[Tensor]) -> list[Tensor]:
        PX, sum_p, sum_gk, gkd_var, gkd_c = state
        scale = self.degree * self.var
        Z, var = self.inputs[0], self.inputs[1]
        grads = [(scale * PX).to(Z.dtype), (sum_gk / self.var + gkd_var).to(var.dtype)]
        if self.offset is not None:
            offset = self.inputs[2]
            grads.append((scale * (sum_p + gkd_c)).to(offset.dtype))
        return grads
