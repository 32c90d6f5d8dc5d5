"""Inducing patches: u_m = g(z_m) for the patch-response function g of a convolutional kernel
(van der Wilk 2018, §5.4; docs/math.md §9). Data only; the maths is in `covariances/patches.py`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ..validation import ArrayLike, seeded_generator
from .base import PointSet
from .initialisation import initial_inducing_inputs

if TYPE_CHECKING:
    from ..kernels.convolutional import Convolutional

#: Patches that k-means++ sees at most when choosing inducing patches from data.
MAX_PATCHES_FOR_INIT = 100_000


class InducingPatches(PointSet):
    """Inducing patches Z [M, h·w], a trainable parameter living in patch space, not image
    space: u_m = g(z_m); `input_dim` is h·w (the kernel fixes the dimension of the images).
    Pair it with `kernels.Convolutional` (the only registered kernel):
    Kuu = k_g(Z, Z), Kuf[m, n] = Σ_q w_q k_g(z_m, x_n^[q]).
    Shapes: images X [N, H·W·C] -> Kuu [M, M], Kuf [M, N]. A sparse model with a
    convolutional kernel and `inducing_points=M` cuts M patches out of its images itself.

    Example:

        >>> import torch, sparsegp as sg
        >>> from sparsegp import covariances
        >>> k = sg.kernels.Convolutional(sg.kernels.SquaredExponential(), image_shape=(4, 4),
        ...                              patch_shape=(2, 2))
        >>> images = torch.rand(6, 16, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        >>> Z = sg.features.InducingPatches.from_data(images, 5, kernel=k)
        >>> tuple(Z.Z.shape), Z.input_dim
        ((5, 4), 4)
        >>> tuple(covariances.Kuu(Z, k).shape), tuple(covariances.Kuf(Z, k, images).shape)
        ((5, 5), (5, 6))
    """

    points_name = "inducing patches"

    def transformed(self, shift: Tensor, scale: Tensor) -> InducingPatches:
        raise TypeError("inducing patches are shared by every position of an image, so per-pixel "
                        "input standardisation (standardize_X=True) cannot be expressed in patch "
                        "space; scale the images yourself (e.g. pixels to [0, 1])")

    @classmethod
    def from_data(cls, X: ArrayLike, num_inducing: int, *, seed: int = 0, method: str = "kmeans++",
                  kernel: Convolutional | None = None, at_most: bool = False) -> InducingPatches:
        """M patches chosen by `method` (seeded k-means++ or random) among the patches of the
        images X [N, H·W·C] that `kernel` (a `kernels.Convolutional`) cuts out, at most
        MAX_PATCHES_FOR_INIT of them (a seeded random subset); with `at_most=True`, no more
        than those patches have distinct values (binary images have few)."""
        if kernel is None or not hasattr(kernel, "patches"):
            raise TypeError("InducingPatches.from_data needs kernel=<a Convolutional kernel> to "
                            "cut patches out of the images")
        X = torch.as_tensor(X, dtype=torch.float64)
        patches = kernel.patches(X).reshape(-1, kernel.patch_dim)
        if patches.shape[0] > MAX_PATCHES_FOR_INIT:
            g = seeded_generator(seed)
            patches = patches[torch.randperm(patches.shape[0], generator=g)[:MAX_PATCHES_FOR_INIT]]
        Z = initial_inducing_inputs(patches, num_inducing, method, seed, at_most=at_most,
                                    rows="patches of the images")
        return cls._from_patches(Z, kernel)

    @classmethod
    def _from_patches(cls, Z: Tensor, kernel: Convolutional) -> InducingPatches:
        return cls(Z)


class MultiChannelPatches(InducingPatches):
    """Inducing patches Z [M, h·w] for the multi-channel convolutional kernel (van der Wilk
    2018, §5.8): C·M inducing variables u_cm = g_c(z_m), the outputs in R^C of the C
    independent response functions at each patch, ordered channel by channel. Pair it with
    `kernels.Convolutional(..., channels=C, multichannel=True)`: Kuu is block diagonal with C
    blocks k_g(Z, Z).
    Shapes: Z [M, h·w], images X [N, H·W·C] -> Kuu [C·M, C·M], Kuf [C·M, N].

    Example:

        >>> import torch, sparsegp as sg
        >>> from sparsegp import covariances
        >>> k = sg.kernels.Convolutional(sg.kernels.SquaredExponential(), image_shape=(4, 4),
        ...                              patch_shape=(2, 2), channels=3, multichannel=True)
        >>> images = torch.rand(6, 48, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        >>> Z = sg.features.MultiChannelPatches.from_data(images, 5, kernel=k)
        >>> tuple(Z.Z.shape), Z.channels, Z.num_inducing
        ((5, 4), 3, 15)
        >>> tuple(covariances.Kuu(Z, k).shape), tuple(covariances.Kuf(Z, k, images).shape)
        ((15, 15), (15, 6))
    """

    def __init__(self, Z: ArrayLike, channels: int) -> None:
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
    def _from_patches(cls, Z: Tensor, kernel: Convolutional) -> MultiChannelPatches:
        return cls(Z, kernel.channels)

    def extra_repr(self) -> str:
        return f"M={self.Z.shape[0]} patches × C={self.channels}, patch size {self.input_dim}"
