"""Inducing patches: u_m = g(z_m) for the patch-response function g of a convolutional kernel
(van der Wilk 2018, §5.4; MATH.md §9). Data only; the maths is in `covariances/patches.py`."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .base import PointSet
from .initialisation import initial_inducing_inputs

#: Patches that k-means++ sees at most when choosing inducing patches from data.
MAX_PATCHES_FOR_INIT = 100_000


class InducingPatches(PointSet):
    """Inducing patches Z [M, h·w], a trainable parameter living in patch space, not image
    space: u_m = g(z_m); `input_dim` is h·w (the kernel fixes the dimension of the images).
    Pair it with `kernels.Convolutional` (the only registered kernel):
    Kuu = k_g(Z, Z), Kuf[m, n] = Σ_q w_q k_g(z_m, x_n^[q])."""

    points_name = "inducing patches"

    def transformed(self, shift: Tensor, scale: Tensor) -> InducingPatches:
        raise TypeError("inducing patches are shared by every position of an image, so per-pixel "
                        "input standardisation (standardize_X=True) cannot be expressed in patch "
                        "space; scale the images yourself (e.g. pixels to [0, 1])")

    @classmethod
    def from_data(cls, X: Any, num_inducing: int, *, seed: int = 0, method: str = "kmeans++",
                  kernel: Any = None) -> InducingPatches:
        """M patches chosen by `method` (seeded k-means++ or random) among the patches of the
        images X [N, H·W·C] that `kernel` (a `kernels.Convolutional`) cuts out, at most
        MAX_PATCHES_FOR_INIT of them (a seeded random subset)."""
        if kernel is None or not hasattr(kernel, "patches"):
            raise TypeError("InducingPatches.from_data needs kernel=<a Convolutional kernel> to "
                            "cut patches out of the images")
        X = torch.as_tensor(X, dtype=torch.float64)
        patches = kernel.patches(X).reshape(-1, kernel.patch_dim)
        if patches.shape[0] > MAX_PATCHES_FOR_INIT:
            g = torch.Generator().manual_seed(seed)
            patches = patches[torch.randperm(patches.shape[0], generator=g)[:MAX_PATCHES_FOR_INIT]]
        return cls._from_patches(initial_inducing_inputs(patches, num_inducing, method, seed), kernel)

    @classmethod
    def _from_patches(cls, Z: Tensor, kernel: Any) -> InducingPatches:
        return cls(Z)


class MultiChannelPatches(InducingPatches):
    """Inducing patches Z [M, h·w] for the multi-channel convolutional kernel (van der Wilk
    2018, §5.8): C·M inducing variables u_cm = g_c(z_m), the outputs in R^C of the C
    independent response functions at each patch, ordered channel by channel. Pair it with
    `kernels.Convolutional(..., channels=C, multichannel=True)`: Kuu is block diagonal with C
    blocks k_g(Z, Z)."""

    def __init__(self, Z: Any, channels: int) -> None:
        super().__init__(Z)
        if isinstance(channels, bool) or not isinstance(channels, int) or channels < 2:
            raise ValueError(f"channels must be an integer ≥ 2; got {channels!r}")
        self.channels = channels

    @property
    def num_inducing(self) -> int:
        return self.Z.shape[0] * self.channels

    def config(self) -> dict[str, Any]:
        cfg = super().config()
        cfg["args"]["channels"] = self.channels
        return cfg

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> MultiChannelPatches:
        return cls(torch.zeros(cfg["args"]["shape"], dtype=torch.float64), cfg["args"]["channels"])

    @classmethod
    def _from_patches(cls, Z: Tensor, kernel: Any) -> MultiChannelPatches:
        return cls(Z, kernel.channels)

    def extra_repr(self) -> str:
        return f"M={self.Z.shape[0]} patches × C={self.channels}, patch size {self.input_dim}"
