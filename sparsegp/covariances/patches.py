"""Inducing patches with a convolutional kernel (van der Wilk 2018, §5.4; MATH.md §9).

u_m = g(z_m), f(x) = Σ_q w_q g(x^[q]), hence Kuu = k_g(Z, Z) and
Kuf[m, n] = Σ_q w_q k_g(z_m, x_n^[q]): one base-kernel evaluation of the M inducing patches
against the Q·B patches of a block of B images (a GEMM for radial kernels:
‖x^[q] − z‖² = ‖x^[q]‖² − 2 x^[q]ᵀz + ‖z‖² on the unfolded patches), then the weighted sum
over q. Cost per image: M·Q base-kernel evaluations, which is the pair's `width`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..config import CHUNK_MEMORY_BYTES, CHUNK_TEMPORARIES
from ..features.patches import InducingPatches
from ..kernels.convolutional import Convolutional
from .registry import register


def _checked(feature: InducingPatches, kernel: Convolutional) -> None:
    if feature.input_dim != kernel.patch_dim:
        h, w = kernel.patch_shape
        raise ValueError(f"the inducing patches have {feature.input_dim} pixels but the kernel's "
                         f"patches are {h}×{w} = {kernel.patch_dim}")


@register("Kuu", InducingPatches, Convolutional)
def _kuu_patches(feature: InducingPatches, kernel: Convolutional) -> Tensor:
    _checked(feature, kernel)
    return kernel.base_kernel.K(feature.Z)


@register("Kuf", InducingPatches, Convolutional)
def _kuf_patches(feature: InducingPatches, kernel: Convolutional, X: Tensor) -> Tensor:
    _checked(feature, kernel)
    Z, Q = feature.Z, kernel.num_patches
    rows = max(1, CHUNK_MEMORY_BYTES // (CHUNK_TEMPORARIES * Z.element_size() * Q * Z.shape[0]))
    blocks = []
    for i in range(0, X.shape[0], rows):
        A = kernel.patches(X[i:i + rows])  # [B, Q, d]
        Kg = kernel.base_kernel.K(A.reshape(-1, A.shape[-1]), Z)  # [B·Q, M]
        blocks.append(kernel.weighted_sum(Kg.reshape(A.shape[0], Q, -1), 1).mT)
    return blocks[0] if len(blocks) == 1 else torch.cat(blocks, 1)


@register("width", InducingPatches, Convolutional)
def _width_patches(feature: InducingPatches, kernel: Convolutional) -> int:
    return feature.num_inducing * kernel.num_patches
