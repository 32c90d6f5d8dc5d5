"""The fast chunked Kuf of inducing points under the rational quadratic kernel."""

from __future__ import annotations

import torch
from torch import Tensor

from ..features.inducing_points import InducingPoints
from ..kernels.rational_quadratic import RationalQuadratic
from ..kernels.stationary import se_augmented
from .inducing_points import CentredPointsCrossCovariance, Points, se_cross_gradients
from .registry import register


@register("chunked", InducingPoints, RationalQuadratic)
class RationalQuadraticCrossCovariance(CentredPointsCrossCovariance):
    """Kuf = σ² (1 + u)^(−α), u = ‖(z − x)/ℓ‖²/(2α), by one augmented matrix product (the
    squared exponential's: [z̃, −½‖z̃‖², 1] · [x̃, 1, −½‖x̃‖²]ᵀ = −½‖z̃ − x̃‖², z̃, x̃ centred
    and scaled) and three elementwise passes (clamp, log1p, exp).

    Gradient (H = gK ∘ K summed over chunks): ∂K/∂r² = −½ K/(1 + u), so Z and ℓ take the
    squared exponential's formulas (`se_cross_gradients`) with H' = H/(1 + u) in place of H;
    ∂σ² = Σ H/σ² + Σ gkdiag and ∂α = Σ H ∘ (u/(1 + u) − log(1 + u)) = Σ H − Σ H' − Σ H log(1 + u).
    """

    def __init__(self, feature: Points, kernel: RationalQuadratic,
                 dtype: torch.dtype | None = None) -> None:
        Z, ell = feature.Z, kernel.value("lengthscale")
        var, alpha = kernel.value("variance"), kernel.value("alpha")
        self.inputs = (Z, ell, var, alpha)
        self._centre(Z, ell, var, dtype, log_scale=False)
        self.alpha = float(alpha.detach())

    def _u(self, Xs: Tensor, out: Tensor | None = None) -> Tensor:
        """u = ‖z̃ − x̃‖²/(2α) ≥ 0 [M, B]."""
        u = torch.mm(self.ZA, se_augmented(Xs).mT, out=out)
        return u.mul_(-1.0 / self.alpha).clamp_min_(0.0)

    def value(self, Xb: Tensor, out: Tensor | None = None) -> Tensor:
        u = self._u(self._scaled(Xb), out)
        return u.log1p_().mul_(-self.alpha).exp_().mul_(self.var)

    def kdiag(self, Xb: Tensor) -> Tensor:
        return self.var.expand(Xb.shape[0])

    def grad_zeros(self) -> list[Tensor]:
        M, D = self.Zs.shape
        # Σ H' [x̃, 1, x̃²] (M, 2D + 1), Σ gkdiag, Σ H, Σ H' and Σ H log(1 + u)
        return [self.Zs.new_zeros(M, 2 * D + 1), *(self.Zs.new_zeros(()) for _ in range(4))]

    def grad_chunk(self, state: list[Tensor], Xb: Tensor, K: Tensor, gK: Tensor,
                   gkdiag: Tensor | None) -> None:
        Xs = self._scaled(Xb)
        log1p_u = self._u(Xs).log1p_()
        H = gK.mul_(K)  # gK is scratch: overwritten
        state[2].add_(H.sum())
        state[4].add_(torch.dot(H.reshape(-1), log1p_u.reshape(-1)))
        Hp = log1p_u.neg_().exp_().mul_(H)  # H/(1 + u), in the log1p buffer
        state[3].add_(Hp.sum())
        state[0].addmm_(Hp, torch.cat([Xs, torch.ones_like(Xs[:, :1]), Xs * Xs], 1))
        if gkdiag is not None:
            state[1].add_(gkdiag.sum())

    def grad_finish(self, state: list[Tensor]) -> list[Tensor]:
        S, gkd, sum_h, sum_hp, sum_hlog = state
        D = self.Zs.shape[1]
        Z, ell, var, alpha = self.inputs
        gZ, g_ell, _ = se_cross_gradients(self.Zs, self.ell, self.var, S[:, :D],
                                          S[:, D:D + 1], S[:, D + 1:].sum(0), ell.dim())
        g_var = sum_h / self.var + gkd
        g_alpha = sum_h - sum_hp - sum_hlog
        return [gZ.to(Z.dtype), g_ell.to(ell.dtype), g_var.to(var.dtype), g_alpha.to(alpha.dtype)]
