"""Kuf one chunk of data at a time, and its vector-Jacobian product, for the streamed objectives.

`cross_covariance(feature, kernel)` returns an object that evaluates the chunk Kuf_b [M, B]
without autograd and, given the gradient gK of some function of Kuf_b (and gkdiag of
diag Kff), accumulates the gradient with respect to its `inputs`. The generic version
recomputes Kuf_b under autograd (any registered pair); pairs that matter for speed have a
hand-derived version registered in `covariances.py` (the squared exponential below), which is
checked against autograd in the tests.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from . import covariances as cov
from .features.inducing_points import InducingPoints
from .kernels.base import Kernel
from .kernels.stationary import SquaredExponential


class CrossCovariance:
    """Generic: value by `covariances.Kuf`, gradient by recomputing it under autograd."""

    def __init__(self, feature: Any, kernel: Kernel, dtype: torch.dtype | None = None) -> None:
        self.feature, self.kernel = feature, kernel
        self.inputs = tuple(p for p in (*feature.parameters(), *kernel.parameters()) if p.requires_grad)
        ref = next(iter(feature.parameters()))
        self.dtype = dtype or ref.dtype
        self.num_inducing = len(feature)

    def _cast(self, Xb: Tensor) -> Tensor:
        return Xb if Xb.dtype == self.dtype else Xb.to(self.dtype)

    def value(self, Xb: Tensor, out: Tensor | None = None) -> Tensor:
        """Kuf for the chunk Xb [B, D] -> [M, B] (no autograd); written into `out` if given."""
        with torch.no_grad():
            K = cov.Kuf(self.feature, self.kernel, Xb).to(self.dtype)
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
            outs, gouts = [cov.Kuf(self.feature, self.kernel, Xb)], [gK]
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


class SquaredExponentialCrossCovariance(CrossCovariance):
    """Kuf = σ² exp(−½‖(z − x)/ℓ‖²) by one augmented matrix product and one exp pass.

    With z̃ = (z − c)/ℓ, x̃ = (x − c)/ℓ (c a fixed centre), the exponent is
    [z̃, log σ² − ½‖z̃‖², 1] · [x̃, 1, −½‖x̃‖²]ᵀ: no B×M temporary besides the result.
    Gradient (H = gK ∘ K, summed over chunks): ∂z_m = (Σ_b H_mb x̃_b − r_m z̃_m)/ℓ,
    ∂ℓ_d = (Σ_m r_m z̃²_md − 2 Σ_m z̃_md (H x̃)_md + Σ_b s_b x̃²_bd)/ℓ_d,
    ∂σ² = Σ H/σ² + Σ gkdiag, with r = rowsums and s = column sums of H; all from one thin
    product H [x̃, 1, x̃²] per chunk (Σ_b s_b x̃²_bd = Σ_m (H x̃²)_md).
    """

    def __init__(self, feature: InducingPoints, kernel: SquaredExponential,
                 dtype: torch.dtype | None = None) -> None:
        Z, ell, var = feature.Z, kernel.value("lengthscale"), kernel.value("variance")
        self.inputs = (Z, ell, var)
        self.dtype = dtype or Z.dtype
        self.num_inducing, D = Z.shape
        with torch.no_grad():
            self.c = Z.mean(0).to(self.dtype)
            self.ell = ell.to(self.dtype).expand(D)
            self.var = var.to(self.dtype)
            self.Zs = (Z.to(self.dtype) - self.c) / self.ell
            norm = torch.log(self.var) - 0.5 * (self.Zs * self.Zs).sum(-1, keepdim=True)
            self.ZA = torch.cat([self.Zs, norm, torch.ones_like(norm)], 1)  # [M, D + 2]

    def _scaled(self, Xb: Tensor) -> Tensor:
        return (self._cast(Xb) - self.c) / self.ell

    def value(self, Xb: Tensor, out: Tensor | None = None) -> Tensor:
        Xs = self._scaled(Xb)
        ones = torch.ones_like(Xs[:, :1])
        XA = torch.cat([Xs, ones, -0.5 * (Xs * Xs).sum(-1, keepdim=True)], 1)  # [B, D + 2]
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
        Hx, r, sx2 = S[:, :D], S[:, D:D + 1], S[:, D + 1:].sum(0)
        gz = Hx - r * self.Zs  # ∂/∂z̃
        gZ = gz / self.ell
        g_ell = ((r * self.Zs * self.Zs).sum(0) - 2.0 * (self.Zs * Hx).sum(0) + sx2) / self.ell
        g_var = r.sum() / self.var + gkd
        Z, ell, var = self.inputs
        if ell.dim() == 0:
            g_ell = g_ell.sum()
        return [gZ.to(Z.dtype), g_ell.to(ell.dtype), g_var.to(var.dtype)]


cov.register("streamed", InducingPoints, SquaredExponential)(SquaredExponentialCrossCovariance)


def cross_covariance(feature: Any, kernel: Kernel, dtype: torch.dtype | None = None
                     ) -> CrossCovariance:
    """The streamed Kuf for this (feature, kernel) pair: a registered fast one or the generic."""
    cls = cov.lookup_streamed(feature, kernel) or CrossCovariance
    return cls(feature, kernel, dtype)
