"""Inducing patches with a convolutional kernel (van der Wilk 2018, §5.4 and §5.8; docs/math.md §9).

One response function g (`InducingPatches`): u_m = g(z_m), f(x) = Σ_q w_q g(x^[q]), hence
Kuu = k_g(Z, Z) and Kuf[m, n] = Σ_q w_q k_g(z_m, x_n^[q]).
Multi-channel (`MultiChannelPatches`, eq. 5.61–5.62): independent g_c per channel,
u_cm = g_c(z_m), so Kuu = blockdiag_c k_g(Z, Z) and Kuf[(c, m), n] = Σ_p w_pc k_g(z_m, x_n^[pc]).
Both are one base-kernel evaluation of the M inducing patches against the Q·B patches of a
block of B images (a GEMM for radial kernels: ‖x^[q] − z‖² = ‖x^[q]‖² − 2 x^[q]ᵀz + ‖z‖² on
the unfolded patches), then the weighted sum within each group. Cost per image: M·Q
base-kernel evaluations, which is the pair's `width`.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
from torch import Tensor

from ..autograd import Context, blockwise_gradients
from ..features.patches import InducingPatches, MultiChannelPatches
from ..kernels.convolutional import Convolutional, weighted_sum
from ..kernels.stationary import SquaredExponential, squared_exponential_exp
from ..runtime.checkpointing import blocked
from ..runtime.config import CHUNK_MEMORY_BYTES, CHUNK_TEMPORARIES
from .inducing_points import se_cross_gradients
from .registry import register


def _checked(feature: InducingPatches, kernel: Convolutional) -> None:
    if feature.input_dim != kernel.patch_dim:
        h, w = kernel.patch_shape
        raise ValueError(f"the inducing patches have {feature.input_dim} pixels but the kernel's "
                         f"patches are {h}×{w} = {kernel.patch_dim}")
    groups = feature.channels if isinstance(feature, MultiChannelPatches) else 1
    if groups != kernel.groups:
        raise ValueError(
            f"{type(feature).__name__} with {groups} response function(s) does not match the "
            f"kernel's {kernel.groups}: use MultiChannelPatches(Z, channels=C) with a "
            "multichannel=True kernel, InducingPatches(Z) otherwise"
        )


@register("Kuu", InducingPatches, Convolutional)
@register("Kuu", MultiChannelPatches, Convolutional)
def _kuu_patches(feature: InducingPatches, kernel: Convolutional) -> Tensor:
    _checked(feature, kernel)
    K = kernel.base_kernel.K(feature.Z)
    return K if kernel.groups == 1 else torch.block_diag(*[K] * kernel.groups)


@register("Kuf", InducingPatches, Convolutional)
@register("Kuf", MultiChannelPatches, Convolutional)
def _kuf_patches(feature: InducingPatches, kernel: Convolutional, X: Tensor) -> Tensor:
    _checked(feature, kernel)
    Z, Q = feature.Z, kernel.num_patches
    rows = max(1, CHUNK_MEMORY_BYTES // (CHUNK_TEMPORARIES * Z.element_size() * Q * Z.shape[0]))
    if X.shape[0] == 0:
        return Z.new_zeros(feature.num_inducing, 0)
    base = kernel.base_kernel
    if type(base) is SquaredExponential and not X.requires_grad and torch.is_grad_enabled():
        ell = base._checked_lengthscale(Z, None)
        return _SquaredExponentialPatches.apply(kernel, X, rows, Z, ell, base.value("variance"),
                                                kernel.grouped_weights())

    def columns(i: int) -> Tensor:  # [G·M, B]
        return _columns(kernel, X[i:i + rows], Z)

    # one block's M·Q kernel values alive at a time, in the backward pass too
    return blocked(columns, range(0, X.shape[0], rows), 1,
                   (*feature.parameters(), *kernel.parameters(), X))


def _columns(kernel: Convolutional, Xb: Tensor, Z: Tensor) -> Tensor:
    """Kuf of a block of images: [G·M, B]."""
    A = kernel.grouped_patches(Xb)  # [B, G, S, d]
    B, G, S, d = A.shape
    Kg = kernel.base_values(A.reshape(-1, d), Z).reshape(B, G, S, -1)  # [B, G, S, M]
    return kernel.weighted_sum(Kg, 2).reshape(B, -1).mT


def _se_columns(kernel: Convolutional, Xb: Tensor, Z: Tensor, ell: Tensor, var: Tensor,
               w: Tensor | None) -> Tensor:
    """`_columns` for a squared-exponential base kernel, from the tensors given
    (differentiable in them): [G·M, B]."""
    A = kernel.grouped_patches(Xb)  # [B, G, S, d]
    B, G, S, d = A.shape
    Kg = squared_exponential_exp(A.reshape(-1, d), Z, ell, var).reshape(B, G, S, -1)
    return weighted_sum(Kg, w, 2).reshape(B, -1).mT


class _PatchesContext(Context, Protocol):
    kernel: Convolutional
    rows: int


class _SquaredExponentialPatches(torch.autograd.Function):
    """Kuf of inducing patches for a squared-exponential base kernel, in blocks of images,
    with the gradient by hand (as `SquaredExponentialCrossCovariance`'s for inducing points):
    per block the patch values K [B·G·S, M] are recomputed once and, with H = ∂Kuf ∘ w ∘ K
    (∂Kuf spread over each image's patches), ∂w_gs = Σ_nm ∂Kuf_ngm K_ngsm and the base
    kernel's gradients come from one thin product Hᵀ[x̃, 1] and H's row sums (the x̃² term
    needs only those) — no autograd pass over the B·Q·M values. Used when the images do not
    require a gradient. Under `create_graph` (a second derivative to follow,
    `torch.func.grad`) each block's gradient is taken by autograd instead, with a graph."""

    @staticmethod
    def forward(kernel: Convolutional, X: Tensor, rows: int, Z: Tensor, ell: Tensor,
                var: Tensor, w: Tensor | None) -> Tensor:
        return torch.cat([_se_columns(kernel, X[i:i + rows], Z, ell, var, w)
                          for i in range(0, X.shape[0], rows)], 1)

    @staticmethod
    def setup_context(ctx: _PatchesContext, inputs: tuple[Any, ...], output: Tensor) -> None:
        kernel, X, rows, Z, ell, var, w = inputs
        ctx.kernel, ctx.rows = kernel, rows
        ctx.save_for_backward(X, Z, ell, var, *(() if w is None else (w,)))

    @staticmethod
    def backward(ctx: _PatchesContext, grad: Tensor) -> tuple[Tensor | None, ...]:
        X, Z, ell, var, *rest = ctx.saved_tensors
        w = rest[0] if rest else None
        kernel = ctx.kernel
        if torch.is_grad_enabled():  # a graph of the gradient is wanted: autograd
            gs = blockwise_gradients(
                lambda i, Z, ell, var, w: _se_columns(kernel, X[i:i + ctx.rows], Z, ell, var, w),
                lambda i: grad[:, i:i + ctx.rows], range(0, X.shape[0], ctx.rows),
                (Z, ell, var, w), ctx.needs_input_grad[3:7])
            return (None, None, None, *gs)
        M, d = Z.shape
        centre = Z.mean(0)  # squared_exponential_exp's centre for the cross-covariance
        ells = ell.expand(d)
        Zs = (Z - centre) / ells
        S_acc = Z.new_zeros(M, d + 1)  # Σ Hᵀ[x̃, 1]
        sx2 = Z.new_zeros(d)  # Σ_rows (Σ_m H) x̃²: needs only H's row sums
        gw = None if w is None else torch.zeros_like(w)
        for i in range(0, X.shape[0], ctx.rows):
            A = kernel.grouped_patches(X[i:i + ctx.rows])  # [B, G, S, d]
            B, G, S, _ = A.shape
            K = squared_exponential_exp(A.reshape(-1, d), Z, ell, var).view(B, G, S, M)
            g = grad[:, i:i + ctx.rows].mT.reshape(B, G, 1, M).to(K.dtype)
            if w is not None and gw is not None:
                gw += torch.einsum("bgsm,bgm->gs", K, g[:, :, 0])
                g = g * w[None, :, :, None]
            H = K.mul_(g).view(-1, M)  # K is scratch from here on
            Xs = (A.reshape(-1, d) - centre) / ells
            S_acc.addmm_(H.mT, torch.cat([Xs, torch.ones_like(Xs[:, :1])], 1))
            sx2 += H.sum(1) @ (Xs * Xs)
        gZ, g_ell, g_var = se_cross_gradients(Zs, ells, var, S_acc[:, :d], S_acc[:, d:], sx2,
                                              ell.dim())
        return (None, None, None, gZ, g_ell, g_var, gw)


@register("width", InducingPatches, Convolutional)
@register("width", MultiChannelPatches, Convolutional)
def _width_patches(feature: InducingPatches, kernel: Convolutional) -> int:
    return feature.Z.shape[0] * kernel.num_patches
