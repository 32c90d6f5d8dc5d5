"""Inducing patches with a convolutional kernel (van der Wilk 2018, §5.4 and §5.8; MATH.md §9).

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

import torch
from torch import Tensor

from ..checkpointing import blocked
from ..config import CHUNK_MEMORY_BYTES, CHUNK_TEMPORARIES
from ..features.patches import InducingPatches, MultiChannelPatches
from ..kernels.convolutional import Convolutional
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

    def columns(i: int) -> Tensor:  # [G·M, B]
        A = kernel.grouped_patches(X[i:i + rows])  # [B, G, S, d]
        B, G, S, d = A.shape
        Kg = kernel.base_values(A.reshape(-1, d), Z).reshape(B, G, S, -1)  # [B, G, S, M]
        return kernel.weighted_sum(Kg, 2).reshape(B, -1).mT

    if X.shape[0] == 0:
        return Z.new_zeros(feature.num_inducing, 0)
    # one block's M·Q kernel values alive at a time, in the backward pass too
    return blocked(columns, range(0, X.shape[0], rows), 1,
                   (*feature.parameters(), *kernel.parameters(), X))


@register("width", InducingPatches, Convolutional)
@register("width", MultiChannelPatches, Convolutional)
def _width_patches(feature: InducingPatches, kernel: Convolutional) -> int:
    return feature.Z.shape[0] * kernel.num_patches
