"""The fast chunked Kuf of inducing points under the spectral mixture kernel."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..features.inducing_points import InducingPoints
from ..kernels.spectral_mixture import SpectralMixture
from ..kernels.stationary import se_augmented
from .chunked import CrossCovariance
from .inducing_points import Points, se_cross_gradients
from .registry import register


def _per_column(v: Tensor, D: int, name: str) -> Tensor:
    if v.shape[1] not in (1, D):
        raise ValueError(f"the inducing inputs have {D} columns but the {name} have shape "
                         f"{tuple(v.shape)} (give [Q, {D}] or [Q, 1])")
    return v.expand(v.shape[0], D)


@register("chunked", InducingPoints, SpectralMixture)
class SpectralMixtureCrossCovariance(CrossCovariance):
    """Kuf = Σ_q w_q E_q ∘ Π_d C_qd with the envelope E_q = exp(−½‖(z − x)/ℓ_q‖²),
    ℓ_q = 1/(2π s_q), and C_qd = cos φ_qd, φ_qd = 2π μ_qd (z_d − x_d), on inputs centred at
    the inducing inputs' mean: w_q E_q by the squared exponential's augmented product and
    one exp, and each cos φ_qd = cos a cos b + sin a sin b (a = 2π μ_qd z_d, b = 2π μ_qd x_d)
    by a rank-2 product: no cosine of an [M, B] matrix.

    Gradient (G = gK summed over chunks; K_diag = Σ w_q has ∂w_q = Σ gkdiag): per component,
    H_q = G ∘ K_q gives ∂w_q = Σ H_q/w_q and the envelope's ∂z, ∂ℓ_q (the squared
    exponential's formulas, `se_cross_gradients`), ∂s_qd = −2π ℓ_qd² ∂ℓ_qd; with
    S_qd = G ∘ w_q E_q ∘ sin φ_qd ∘ Π_{d'≠d} C_qd' (prefix and suffix products over d),
    ∂z_md −= 2π μ_qd Σ_b S_qd,mb and ∂μ_qd = −2π Σ_mb S_qd,mb (z_md − x_bd). Values of
    one column for every column ([Q, 1]) take the sum of the columns' gradients. One thin
    product per component ([x̃, 1, x̃²]) and one per component and column ([1, x_d]).
    """

    def __init__(self, feature: Points, kernel: SpectralMixture,
                 dtype: torch.dtype | None = None) -> None:
        Z = feature.Z
        w, mu, s = kernel.value("weights"), kernel.value("means"), kernel.value("scales")
        M, D = Z.shape
        self.inputs = (Z, w, mu, s)
        self.dtype = dtype or Z.dtype
        self.num_inducing = self.width = M
        self.w = w.detach().to(self.dtype)
        self.mu = _per_column(mu.detach(), D, "means").to(self.dtype)  # [Q, D]
        self.ell = 1.0 / (2.0 * math.pi * _per_column(s.detach(), D, "scales").to(self.dtype))
        Zd = Z.detach().to(self.dtype)
        self.c = Zd.mean(0)
        self.Zc = Zd - self.c  # [M, D]
        self.Zs = self.Zc / self.ell[:, None, :]  # [Q, M, D]
        self.ZA = se_augmented(self.Zs, torch.log(self.w)[:, None, None])  # [Q, M, D + 2]
        phase = (2.0 * math.pi) * self.mu[:, None, :] * self.Zc  # [Q, M, D]
        self.cz, self.sz = torch.cos(phase), torch.sin(phase)

    def _x_phases(self, Xc: Tensor, q: int) -> tuple[Tensor, Tensor]:
        phase = (2.0 * math.pi) * self.mu[q] * Xc  # [B, D]
        return torch.cos(phase), torch.sin(phase)

    def _envelope(self, Xc: Tensor, q: int, out: Tensor | None = None) -> Tensor:
        """w_q E_q [M, B]."""
        XA = se_augmented(Xc / self.ell[q])
        return torch.mm(self.ZA[q], XA.mT, out=out).exp_()

    def _cos(self, q: int, d: int, cx: Tensor, sx: Tensor) -> Tensor:
        """cos φ_qd = cos a cos b + sin a sin b [M, B]."""
        left = torch.stack([self.cz[q, :, d], self.sz[q, :, d]], 1)
        return torch.mm(left, torch.stack([cx[:, d], sx[:, d]], 0))

    def _sin(self, q: int, d: int, cx: Tensor, sx: Tensor) -> Tensor:
        """sin φ_qd = sin a cos b − cos a sin b [M, B]."""
        left = torch.stack([self.sz[q, :, d], -self.cz[q, :, d]], 1)
        return torch.mm(left, torch.stack([cx[:, d], sx[:, d]], 0))

    def value(self, Xb: Tensor, out: Tensor | None = None) -> Tensor:
        Xc = self._cast(Xb) - self.c
        D = Xc.shape[1]
        total: Tensor | None = None
        for q in range(self.mu.shape[0]):
            cx, sx = self._x_phases(Xc, q)
            term = self._envelope(Xc, q, out if q == 0 else None)
            for d in range(D):
                term.mul_(self._cos(q, d, cx, sx))
            total = term if total is None else total.add_(term)
        assert total is not None
        return total

    def kdiag(self, Xb: Tensor) -> Tensor:
        return self.w.sum().expand(Xb.shape[0])

    def grad_zeros(self) -> list[Tensor]:
        Q, M, D = self.Zs.shape
        z = self.Zc.new_zeros
        # per component: Σ H_q [x̃, 1, x̃²]; per component and column: Σ S_qd [1, x_d];
        # Σ gkdiag
        return [z(Q, M, 2 * D + 1), z(Q, D, M, 2), z(())]

    def grad_chunk(self, state: list[Tensor], Xb: Tensor, K: Tensor, gK: Tensor,
                   gkdiag: Tensor | None) -> None:
        Xc = self._cast(Xb) - self.c
        D = Xc.shape[1]
        ones = torch.ones_like(Xc[:, :1])
        for q in range(self.mu.shape[0]):
            cx, sx = self._x_phases(Xc, q)
            cosines = [self._cos(q, d, cx, sx) for d in range(D)]
            after: list[Tensor | None] = [None] * D  # Π_{d' > d} C_qd'
            for d in range(D - 2, -1, -1):
                nxt = after[d + 1]
                after[d] = cosines[d + 1] if nxt is None else nxt * cosines[d + 1]
            pre = self._envelope(Xc, q).mul_(gK)  # G ∘ w_q E_q ∘ Π_{d' < d} C_qd'
            for d in range(D):
                S = self._sin(q, d, cx, sx).mul_(pre)
                rest = after[d]
                if rest is not None:
                    S.mul_(rest)
                state[1][q, d].addmm_(S, torch.cat([ones, Xc[:, d:d + 1]], 1))
                pre.mul_(cosines[d])
            Xs = Xc / self.ell[q]
            state[0][q].addmm_(pre, torch.cat([Xs, ones, Xs * Xs], 1))  # pre = H_q here
        if gkdiag is not None:
            state[2].add_(gkdiag.sum())

    def grad_finish(self, state: list[Tensor]) -> list[Tensor]:
        SE, SC, gkd = state
        Z, w, mu, s = self.inputs
        Q, M, D = self.Zs.shape
        gZ = torch.zeros_like(self.Zc)
        g_w = torch.empty_like(self.w)
        g_ell = torch.empty_like(self.ell)
        for q in range(Q):
            S = SE[q]
            gz, g_ell[q], g_w[q] = se_cross_gradients(
                self.Zs[q], self.ell[q], self.w[q], S[:, :D], S[:, D:D + 1],
                S[:, D + 1:].sum(0), 1)
            gZ += gz
        row, xsum = SC[..., 0], SC[..., 1].sum(-1)  # [Q, D, M], [Q, D]
        two_pi = 2.0 * math.pi
        gZ -= two_pi * (self.mu[:, :, None] * row).sum(0).mT
        g_mu = -two_pi * ((row * self.Zc.mT).sum(-1) - xsum)  # [Q, D]
        g_s = -two_pi * self.ell * self.ell * g_ell
        if mu.shape[1] != D:
            g_mu = g_mu.sum(1, keepdim=True)
        if s.shape[1] != D:
            g_s = g_s.sum(1, keepdim=True)
        return [gZ.to(Z.dtype), (g_w + gkd).to(w.dtype), g_mu.to(mu.dtype), g_s.to(s.dtype)]
