"""Inducing points (u = f(Z)) with any kernel, and their fast chunked Kuf for the squared
exponential."""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

from ..features.inducing_points import InducingPoints
from ..kernels.base import Kernel
from ..kernels.stationary import SquaredExponential, se_augmented
from .chunked import CrossCovariance
from .registry import register


@register("Kuu", InducingPoints, Kernel, kernel_subclasses=True)
def _kuu_points(feature: InducingPoints, kernel: Kernel) -> Tensor:
    return kernel.K(feature.Z)


@register("Kuf", InducingPoints, Kernel, kernel_subclasses=True)
def _kuf_points(feature: InducingPoints, kernel: Kernel, X: Tensor) -> Tensor:
    return kernel.K(feature.Z, X)


class Points(Protocol):
    """What the chunked Kuf reads of its feature: the points Z [M, D]."""

    @property
    def Z(self) -> Tensor: ...


def se_cross_gradients(Zs: Tensor, ell: Tensor, var: Tensor, Hx: Tensor, r: Tensor,
                       sx2: Tensor, ell_dim: int) -> tuple[Tensor, Tensor, Tensor]:
    """∂Z, ∂ℓ, ∂σ² of Σ H ∘ K for K = σ² exp(−½‖x̃ − z̃‖²) (x̃ = (x − c)/ℓ, z̃ = (z − c)/ℓ)
    from the sums Hx = Hᵀx̃ [M, D], r = H's column sums [M, 1] and sx2 = Σ_rows (Σ_m H) x̃²
    [D]; ℓ [D] expanded (`ell_dim` 0: a scalar lengthscale, its gradient summed)."""
    gZ = (Hx - r * Zs) / ell
    g_ell = ((r * Zs * Zs).sum(0) - 2.0 * (Zs * Hx).sum(0) + sx2) / ell
    return gZ, g_ell.sum() if ell_dim == 0 else g_ell, r.sum() / var


class CentredPointsCrossCovariance(CrossCovariance):
    """What the chunked Kuf of inducing points under a radial kernel of the augmented product
    share: z̃ = (z − c)/ℓ with c the inducing inputs' mean, the rows [z̃, s − ½‖z̃‖², 1]
    (`se_augmented`, s the log-scale a subclass folds into the product) and x̃ of a chunk."""

    def _centre(self, Z: Tensor, ell: Tensor, var: Tensor, dtype: torch.dtype | None,
                log_scale: bool) -> None:
        self.dtype = dtype or Z.dtype
        self.num_inducing, D = Z.shape
        self.width = self.num_inducing
        with torch.no_grad():
            self.c = Z.mean(0).to(self.dtype)
            # detached: `.to` of the same dtype would return the parameter's value itself
            self.ell = ell.detach().to(self.dtype).expand(D)
            self.var = var.detach().to(self.dtype)
            self.Zs = (Z.to(self.dtype) - self.c) / self.ell
            s = torch.log(self.var) if log_scale else torch.zeros_like(self.var)
            self.ZA = se_augmented(self.Zs, s)  # [M, D + 2]

    def _scaled(self, Xb: Tensor) -> Tensor:
        return (self._cast(Xb) - self.c) / self.ell


@register("chunked", InducingPoints, SquaredExponential)
class SquaredExponentialCrossCovariance(CentredPointsCrossCovariance):
    """Kuf = σ² exp(−½‖(z − x)/ℓ‖²) by one augmented matrix product and one exp pass.

    With z̃ = (z − c)/ℓ, x̃ = (x − c)/ℓ (c a fixed centre), the exponent is
    [z̃, log σ² − ½‖z̃‖², 1] · [x̃, 1, −½‖x̃‖²]ᵀ: no B×M temporary besides the result.
    Gradient (H = gK ∘ K, summed over chunks): ∂z_m = (Σ_b H_mb x̃_b − r_m z̃_m)/ℓ,
    ∂ℓ_d = (Σ_m r_m z̃²_md − 2 Σ_m z̃_md (H x̃)_md + Σ_b s_b x̃²_bd)/ℓ_d,
    ∂σ² = Σ H/σ² + Σ gkdiag, with r = rowsums and s = column sums of H; all from one thin
    product H [x̃, 1, x̃²] per chunk (Σ_b s_b x̃²_bd = Σ_m (H x̃²)_md).
    """

    def __init__(self, feature: Points, kernel: SquaredExponential,
                 dtype: torch.dtype | None = None) -> None:
        Z, ell, var = feature.Z, kernel.value("lengthscale"), kernel.value("variance")
        self.inputs = (Z, ell, var)
        self._centre(Z, ell, var, dtype, log_scale=True)

    def value(self, Xb: Tensor, out: Tensor | None = None) -> Tensor:
        XA = se_augmented(self._scaled(Xb))  # [B, D + 2]
        return torch.mm(self.ZA, XA.mT, out=out).exp_()

    def kdiag(self, Xb: Tensor) -> Tensor:
        return self.var.expand(Xb.shape[0])

    def grad_zeros(self) -> list[Tensor]:
        M, D = self.Zs.shape
        # Σ H [x̃, 1, x̃²] (M, 2D+1) and Σ gkdiag
        return [self.Zs.new_zeros(M, 2 * D + 1), self.Zs.new_zeros(())]

    def grad_chunk(self, state: list[Tensor], Xb: Tensor, K: Tensor, gK: Tensor,
                   gkdiag: Tensor | None) -> None:
        H = gK.mul_(K)  # gK is scratch: overwritten
        Xs = self._scaled(Xb)
        state[0].addmm_(H, torch.cat([Xs, torch.ones_like(Xs[:, :1]), Xs * Xs], 1))
        if gkdiag is not None:
            state[1].add_(gkdiag.sum())

    def grad_finish(self, state: list[Tensor]) -> list[Tensor]:
        S, gkd = state
        D = self.Zs.shape[1]
        Z, ell, var = self.inputs
        gZ, g_ell, g_var = se_cross_gradients(self.Zs, self.ell, self.var, S[:, :D],
                                              S[:, D:D + 1], S[:, D + 1:].sum(0), ell.dim())
        return [gZ.to(Z.dtype), g_ell.to(ell.dtype), (g_var + gkd).to(var.dtype)]
