"""The fast chunked Kuf of inducing points under the arc-cosine kernel."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..features.inducing_points import InducingPoints
from ..kernels.arccosine import DIAGONAL, SNAP, ArcCosine
from .chunked import CrossCovariance
from .inducing_points import Points
from .registry import register


@register("chunked", InducingPoints, ArcCosine)
class ArcCosineCrossCovariance(CrossCovariance):
    """Kuf = (σ²/π) J_n(c) R^n, R = ‖z‖ ‖x‖, c = clamp((Σ_d w_d z_d x_d + b)/R, −1, 1), with
    ‖x‖² = q_x = Σ_d w_d x_d² + b: one matrix product (Z w) Xᵀ per chunk, then the kernel's
    own elementwise steps in its order (the same clamp, and for order 0 the same snapping of
    cosines within `SNAP` rounding units of 1 to 1), so that the value is `ArcCosine.K`'s.

    Gradient (G = gK, g = gkdiag, summed over chunks; ν = ‖x‖, ζ = ‖z‖, s = σ²/π): with
    J'_0 = 1/sin θ (0 at sin θ = 0, so at the snapped cosines), J'_1 = J_0, J'_2 = 4 J_1 and
    Y = G ∘ J'_n(c), 0 where c was clamped, ∂c = s R^n ∘ Y; the dot product's
    F = s ζ^(n−1) Y ν^(n−1) and E = R ∂R = n G ∘ K − s ζ^n (Y ∘ c) ν^n, so that
    ∂q_z,m = Σ_b E_mb/(2 q_z,m) and ∂q_x,b = Σ_m E_mb/(2 q_x,b) + g_b σ² D_n n q_x,b^(n−1)
    (K_diag = σ² D_n q_x^n, D = 1, 1, 3). Then ∂z_md = w_d (F X)_md + 2 w_d z_md ∂q_z,m,
    ∂w_d = Σ_m z_md (F X)_md + Σ_m ∂q_z,m z_md² + Σ_b ∂q_x,b x_bd² (summed over d for one
    scalar w), ∂b = Σ F + Σ_m ∂q_z,m + Σ_b ∂q_x,b, ∂σ² = Σ G ∘ K/σ² + Σ_b g_b D_n q_x,b^n.
    The diagonal scalings by ζ and ν move to the thin side: one product Y [ν^(n−1) x,
    ν^(n−1)] per chunk gives F X and Σ F, and the rest are row and column sums.
    """

    def __init__(self, feature: Points, kernel: ArcCosine,
                 dtype: torch.dtype | None = None) -> None:
        Z, var = feature.Z, kernel.value("variance")
        w, b = kernel.value("weight_variances"), kernel.value("bias_variance")
        if w.dim() == 1 and w.shape[0] != Z.shape[1]:
            raise ValueError(f"the inducing inputs have {Z.shape[1]} columns but the weight "
                             f"variances have shape {tuple(w.shape)}")
        self.inputs = (Z, var, w, b)
        self.dtype = dtype or Z.dtype
        self.num_inducing = self.width = Z.shape[0]
        self.order = kernel.order
        self.Z = Z.detach().to(self.dtype)
        self.var = var.detach().to(self.dtype)
        self.w = w.detach().to(self.dtype)
        self.b = b.detach().to(self.dtype)
        self.Zw = self.Z * self.w
        self.qz = self._squared_norms(self.Z)
        self.nz = torch.sqrt(self.qz)

    def _squared_norms(self, X: Tensor) -> Tensor:
        """q = Σ_d w_d x_d² + b [rows], as the kernel forms it."""
        return (X * X * self.w).sum(-1) + self.b

    def _cosines(self, Xb: Tensor, out: Tensor | None = None
                 ) -> tuple[Tensor, Tensor, Tensor]:
        """(the unclamped cosines [M, B], R = ‖z‖ ‖x‖ [M, B], ‖x‖ [B]), as the kernel
        forms them."""
        nx = torch.sqrt(self._squared_norms(Xb))
        outer = torch.outer(self.nz, nx)
        dot = torch.mm(self.Zw, Xb.mT, out=out).add_(self.b)
        return dot.div_(outer), outer, nx

    def _clamped(self, c: Tensor) -> Tensor:
        """The kernel's cosines, in place: clamped into [−1, 1] (order 0: within `SNAP`
        rounding units of 1 set to 1)."""
        c = c.clamp_(-1.0, 1.0)
        if self.order == 0:
            c.masked_fill_(c >= 1.0 - SNAP * torch.finfo(c.dtype).eps, 1.0)
        return c

    def value(self, Xb: Tensor, out: Tensor | None = None) -> Tensor:
        c, outer, _ = self._cosines(self._cast(Xb), out)
        K = _angular_(self._clamped(c), self.order).mul_(self.var / math.pi)
        if self.order:
            K.mul_(outer if self.order == 1 else outer.square_())
        return K if out is None or K is out else out.copy_(K)

    def kdiag(self, Xb: Tensor) -> Tensor:
        q = self._squared_norms(self._cast(Xb))
        return (self.var * DIAGONAL[self.order]) * q ** self.order

    def grad_zeros(self) -> list[Tensor]:
        M, D = self.Z.shape
        z = self.Z.new_zeros
        # Σ Y [ν^k x, ν^k] (M, D + 1), Σ_b of G ∘ K and of W ν^n [M], Σ_m of G ∘ K and of
        # ‖z‖^n W [B] reduced to Σ_b ∂q_x x² [D] and Σ ∂q_x, Σ G ∘ K, Σ g D_n q_x^n
        return [z(M, D + 1), z(M), z(M), z(D), *(z(()) for _ in range(3))]

    def grad_chunk(self, state: list[Tensor], Xb: Tensor, K: Tensor, gK: Tensor,
                   gkdiag: Tensor | None) -> None:
        Xb = self._cast(Xb)
        n = self.order
        raw, _, nx = self._cosines(Xb)
        c = self._clamped(raw.clone())
        # clamped entries pass no derivative (order 0: J'_0 is 0 at c = 1 already)
        clamped = c != raw if n else None
        Y = _slope_(c, n).mul_(gK)  # G J'_n(c) (c's buffer)
        if clamped is not None:
            Y.masked_fill_(clamped, 0.0)
        nxn = nx ** n
        nxk = nx ** (n - 1)  # F = (σ²/π) Y ∘ R^(n−1) = (σ²/π) ‖z‖^(n−1) Y ‖x‖^(n−1)
        state[0].addmm_(Y, torch.cat([Xb * nxk[:, None], nxk[:, None]], 1))
        W = raw.mul_(Y)  # Y ∘ c, so that g_c ∘ c = (σ²/π) ‖z‖^n W ‖x‖^n
        P = gK.mul_(K)  # G ∘ K (gK is scratch)
        state[1].add_(P.sum(1), alpha=float(n))
        state[2].add_(W @ nxn)
        scale = self.var / math.pi
        E_cols = P.sum(0).mul_(float(n)).sub_(torch.mv(W.mT, self.nz ** n).mul_(nxn).mul_(scale))
        gqx = E_cols.div_(2.0 * nx * nx)
        state[6].add_(P.sum())
        if gkdiag is not None:
            g = gkdiag.to(self.dtype)
            d = DIAGONAL[self.order]
            qx = nx * nx
            state[5].add_(torch.dot(g, qx ** n) * d)
            if n:
                gqx.add_(g * (self.var * d * n) * qx ** (n - 1))
        state[3].add_(gqx @ (Xb * Xb))
        state[4].add_(gqx.sum())

    def grad_finish(self, state: list[Tensor]) -> list[Tensor]:
        YX, Pz, Wz, Sx2, Sqx, Sdiag, SGK = state
        Z, var, w, b = self.inputs
        n = self.order
        scale = self.var / math.pi
        nzk = self.nz ** (n - 1)
        FX = scale * nzk[:, None] * YX[:, :-1]  # Σ F x [M, D]
        sum_f = scale * (nzk * YX[:, -1]).sum()
        gqz = (Pz - scale * self.nz ** n * Wz) / (2.0 * self.qz)  # [M]
        gZ = self.w * (FX + 2.0 * self.Z * gqz[:, None])
        gw = (self.Z * FX).sum(0) + gqz @ (self.Z * self.Z) + Sx2
        gb = sum_f + gqz.sum() + Sqx
        g_var = SGK / self.var + Sdiag
        return [gZ.to(Z.dtype), g_var.to(var.dtype), (gw if w.dim() else gw.sum()).to(w.dtype),
                gb.to(b.dtype)]


def _angular_(c: Tensor, order: int) -> Tensor:
    """J_n(c) (`kernels.arccosine._angular`, the same operations in the same order) in
    fewer buffers: in c's own for order 0."""
    rest = torch.acos(c).neg_().add_(math.pi)  # π − θ
    if order == 0:
        return c.copy_(rest)
    s = torch.mul(c, c).neg_().add_(1.0).clamp_min_(0.0).sqrt_()  # sin θ
    if order == 1:
        return rest.mul_(c).add_(s)
    t = torch.mul(c, 2.0).mul_(c).add_(1.0)  # 1 + 2c²
    return rest.mul_(t).add_(s.mul_(3.0).mul_(c))


def _slope_(c: Tensor, order: int) -> Tensor:
    """dJ_n/dc, in c's buffer: 1/sin θ (0 where sin θ = 0), J_0 or 4 J_1."""
    if order == 0:
        u = torch.mul(c, c).neg_().add_(1.0).clamp_min_(0.0)  # sin² θ
        return c.copy_(torch.where(u > 0, u.rsqrt_(), 0.0))
    return c.copy_(_angular_(c.clone(), order - 1).mul_(4.0 if order == 2 else 1.0))
