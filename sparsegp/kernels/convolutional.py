"""Convolutional kernels for images: f(x) = Σ_p w_p g(x^[p]) over the patches of an image
(van der Wilk, Rasmussen & Hensman 2017; van der Wilk 2018, ch. 5; docs/math.md §9).

An image is a row of H·W·C pixels in (row, column, channel) order, i.e. `image.reshape(-1)` of
an [H, W, C] array. Its patches x^[p] are the h×w windows at every position (stride 1), one
per channel: Q = P·C patches of h·w pixels, P = (H − h + 1)(W − w + 1), numbered q = p·C + c
with p running over window positions row by row. With g ~ GP(0, k_g),

    k_f(x, x') = Σ_q Σ_q' w_q w_q' k_g(x^[q], x'^[q']),

all w_q = 1 for the translation-invariant kernel (§5.5) and trainable weights for
`weighted=True` (§5.6; for colour images the baseline kernel over all patches of all
channels, §5.8). The multi-channel kernel (`multichannel=True`, §5.8, eq. 5.61–5.62) gives
every channel its own independent response function g_c ~ GP(0, k_g):
f(x) = Σ_p Σ_c w_pc g_c(x^[pc]), so k_f sums only pairs of patches of the same channel, and
its inducing outputs g(z_m) ∈ R^C (`features.MultiChannelPatches`) have a block-diagonal Kuu.
Inducing patches pair with this kernel in `covariances/patches.py`; the kernel itself knows
nothing of inducing variables.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor

from ..autograd import Context, blockwise_gradients
from ..runtime.checkpointing import blocked
from ..runtime.config import CHUNK_MEMORY_BYTES
from ..validation import ArrayLike
from .base import Kernel, kernel_from_config
from .stationary import (
    RadialKernel,
    SquaredExponential,
    half_distance_sums,
    scaled_squared_distance,
    squared_exponential_exp,
)


def _pair(value: Sequence[int], name: str) -> tuple[int, int]:
    try:
        a, b = (int(v) for v in value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a pair of positive integers (height, width); "
                        f"got {value!r}") from None
    if a < 1 or b < 1 or (a, b) != tuple(value):
        raise ValueError(f"{name} must be a pair of positive integers (height, width); got {value!r}")
    return a, b


class Convolutional(Kernel):
    """k_f(x, x') = Σ_q Σ_q' w_q w_q' k_g(x^[q], x'^[q']) over the Q = P·C patches of images
    (with `multichannel=True`: over pairs of patches of the same channel only).

    Shapes: X [N, H·W·C] (channels last), patches [N, Q, h·w], weights [Q] (trainable when
    `weighted=True`; all 1 otherwise). The base kernel `k_g` acts on patches of h·w pixels (an
    ARD lengthscale has shape (h·w,)). K_diag costs Q² base-kernel evaluations per image
    (Q²/C multi-channel) and K(X, X2) as many per pair: both go in blocks of bounded memory.

    >>> import sparsegp as sg
    >>> k = sg.kernels.Convolutional(sg.kernels.SquaredExponential(), image_shape=(28, 28),
    ...                              patch_shape=(5, 5))
    >>> k.num_patches, k.patch_dim
    (576, 25)
    """

    weights: Tensor  # a parameter only when `weighted`

    def __init__(self, base_kernel: Kernel, image_shape: Sequence[int], patch_shape: Sequence[int],
                 weighted: bool = False, channels: int = 1, weights: ArrayLike | None = None,
                 multichannel: bool = False) -> None:
        super().__init__()
        if not isinstance(base_kernel, Kernel) or isinstance(base_kernel, Convolutional):
            raise TypeError("base_kernel must be a kernel on patches (not convolutional); got "
                            f"{type(base_kernel).__name__}")
        self.base_kernel = base_kernel
        self.image_shape = _pair(image_shape, "image_shape")
        self.patch_shape = _pair(patch_shape, "patch_shape")
        (H, W), (h, w) = self.image_shape, self.patch_shape
        if h > H or w > W:
            raise ValueError(f"patch_shape {self.patch_shape} is larger than image_shape "
                             f"{self.image_shape}")
        if isinstance(channels, bool) or not isinstance(channels, (int, np.integer)) or channels < 1:
            raise ValueError(f"channels must be a positive integer; got {channels!r}")
        self.channels = int(channels)
        self.multichannel = bool(multichannel)
        if self.multichannel and channels < 2:
            raise ValueError("multichannel=True needs images with channels ≥ 2")
        self.weighted = bool(weighted)
        if weights is not None and not self.weighted:
            raise ValueError("weights are only used with weighted=True")
        if self.weighted:
            w0 = torch.ones(self.num_patches, dtype=torch.float64) if weights is None else \
                torch.as_tensor(weights, dtype=torch.float64).detach().clone()
            if w0.shape != (self.num_patches,) or not bool(torch.isfinite(w0).all()):
                raise ValueError(f"weights must be {self.num_patches} finite numbers (one per patch "
                                 f"and channel); got shape {tuple(w0.shape)}")
            self._add_free("weights", w0)

    # -- shapes ---------------------------------------------------------------------------
    @property
    def positions(self) -> tuple[int, int]:
        """(H − h + 1, W − w + 1): the window positions along each axis."""
        (H, W), (h, w) = self.image_shape, self.patch_shape
        return H - h + 1, W - w + 1

    @property
    def num_patches(self) -> int:
        """Q = P·C patches per image."""
        return math.prod(self.positions) * self.channels

    @property
    def patch_dim(self) -> int:
        """h·w pixels per patch."""
        return math.prod(self.patch_shape)

    @property
    def input_dim(self) -> int:  # type: ignore[override]  # read-only here: fixed by the image shape
        """H·W·C pixels per image (the columns of X)."""
        return math.prod(self.image_shape) * self.channels

    @property
    def evaluation_cost(self) -> int:  # type: ignore[override]  # read-only here: fixed by the patches
        """Base-kernel evaluations in one k_f(x, x'): Q² (Q²/C multi-channel)."""
        return self.num_patches ** 2 // self.groups

    @property
    def groups(self) -> int:
        """G independent patch-response functions: C for `multichannel`, else 1."""
        return self.channels if self.multichannel else 1

    # -- patches --------------------------------------------------------------------------
    def check_images(self, X: Tensor, name: str = "X") -> Tensor:
        if not isinstance(X, Tensor) or X.dim() != 2:
            shape = tuple(X.shape) if isinstance(X, Tensor) else type(X).__name__
            raise ValueError(f"{name} must be a 2-D tensor [N, H·W·C]; got {shape}")
        if X.shape[1] != self.input_dim:
            H, W = self.image_shape
            raise ValueError(
                f"{name} has {X.shape[1]} columns but the convolutional kernel is for "
                f"{H}×{W} images with {self.channels} channel(s): {self.input_dim} columns"
            )
        return X

    def patches(self, X: Tensor) -> Tensor:
        """All patches of every image. Shapes: X [N, H·W·C] -> [N, Q, h·w] (q = p·C + c)."""
        X = self.check_images(X)
        (H, W), (h, w), C = self.image_shape, self.patch_shape, self.channels
        images = X.reshape(-1, H, W, C)
        windows = images.unfold(1, h, 1).unfold(2, w, 1)  # a view [N, H', W', C, h, w]
        return windows.reshape(X.shape[0], self.num_patches, self.patch_dim)

    def grouped_patches(self, X: Tensor) -> Tensor:
        """The patches by response function. Shapes: X [N, H·W·C] -> [N, G, S, h·w], S = Q/G
        (G = C groups of one channel's P patches for `multichannel`; else one group of all Q)."""
        A = self.patches(X)
        N, G = A.shape[0], self.groups
        return A.reshape(N, -1, G, self.patch_dim).transpose(1, 2)

    def grouped_weights(self) -> Tensor | None:
        """The weights as [G, S] in the order of `grouped_patches` (None: all 1)."""
        if not self.weighted:
            return None
        return self.weights.reshape(-1, self.groups).mT

    def weighted_sum(self, K: Tensor, dim: int) -> Tensor:
        """Σ_s w_gs K[..., g, ..., s, ...] over dimension `dim` (of size S), where dimension 1
        of K holds the group g. Shapes: K [n, G, ...]."""
        return weighted_sum(K, self.grouped_weights(), dim)

    # -- covariances ----------------------------------------------------------------------
    # Blocks of images are evaluated by `checkpointing.blocked`: the Q² base-kernel values per
    # pair of images are never all alive, in the forward or the backward pass.
    def K(self, X: Tensor, X2: Tensor | None = None) -> Tensor:
        X2 = X if X2 is None else self.check_images(X2, "X2")
        N, N2 = self.check_images(X).shape[0], X2.shape[0]
        rows = max(1, int(math.sqrt(_budget_elements(X) * self.groups / self.num_patches**2)))
        inputs = (*self.parameters(), X, X2)

        def pair(i: int, j: int) -> Tensor:  # [n, n2]
            a = self.grouped_patches(X[i:i + rows]).transpose(0, 1)  # [G, n, S, d]
            b = self.grouped_patches(X2[j:j + rows]).transpose(0, 1)
            G, n, S, d = a.shape
            Kg = torch.stack([self.base_kernel.K(a[g].reshape(-1, d), b[g].reshape(-1, d))
                              for g in range(G)])  # [G, n·S, n2·S]
            Kg = Kg.reshape(G, n, S, b.shape[1], S).transpose(0, 1)  # [n, G, S, n2, S]
            return self.weighted_sum(self.weighted_sum(Kg, 4), 2).sum(1)

        def line(i: int) -> Tensor:  # [n, N2]
            return blocked(lambda j: pair(i, j), range(0, N2, rows), 1, inputs)

        if N == 0 or N2 == 0:
            return X.new_zeros(N, N2)
        return blocked(line, range(0, N, rows), 0, inputs)

    def K_diag(self, X: Tensor) -> Tensor:
        N = self.check_images(X).shape[0]
        S = self.num_patches // self.groups
        rows = max(1, _budget_elements(X) // (self.groups * S * S))

        def diag(i: int) -> Tensor:  # [n]
            a = self.grouped_patches(X[i:i + rows])  # [n, G, S, d]
            n, G, S, d = a.shape
            Kg = self._gram(a.reshape(-1, S, d)).reshape(n, G, S, S)
            return self.weighted_sum(self.weighted_sum(Kg, 2), 2).sum(1)

        if N == 0:
            return X.new_zeros(0)
        base = self.base_kernel
        if type(base) is SquaredExponential and not X.requires_grad and torch.is_grad_enabled():
            ell = base._checked_lengthscale(X[:0, :self.patch_dim], None)
            return _SquaredExponentialDiagonal.apply(self, X, rows, ell, base.value("variance"),
                                                     self.grouped_weights())
        return blocked(diag, range(0, N, rows), 0, (*self.parameters(), X))

    def _gram(self, A: Tensor) -> Tensor:
        """k_g between the patches of each image. Shapes: A [n, S, d] -> [n, S, S]."""
        base = self.base_kernel
        if type(base) is SquaredExponential:  # one bmm and one exp pass for the block
            ell = base._checked_lengthscale(A[0], None)
            return squared_exponential_exp(A, A, ell, base.value("variance"))
        if isinstance(base, RadialKernel):  # batched: one bmm for the block
            r2 = scaled_squared_distance(A, None, base._checked_lengthscale(A[0], None))
            return base.value("variance") * base.profile(r2)
        if A.shape[0] == 0:
            return A.new_zeros(0, A.shape[1], A.shape[1])
        return torch.stack([base.K(a) for a in A])

    def base_values(self, A: Tensor, Z: Tensor) -> Tensor:
        """k_g(a, z) for patches A [n, d] against patches Z [M, d] -> [n, M] (the fused
        squared-exponential evaluation where k_g is one)."""
        base = self.base_kernel
        if type(base) is SquaredExponential:
            ell = base._checked_lengthscale(A, Z)
            return squared_exponential_exp(A, Z, ell, base.value("variance"))
        return base.K(A, Z)

    # -- data-based starting values -------------------------------------------------------
    def initialise_from_data(self, X: Tensor, signal_variance: float) -> None:
        """The base kernel from patches of (up to 1000 of) the images, its variance then
        rescaled so that k_f(x, x) averages `signal_variance` over those images."""
        sample = X[torch.linspace(0, X.shape[0] - 1, min(X.shape[0], 1000)).long()]
        A = self.patches(sample)
        rescale = "variance" in self.base_kernel._unset
        self.base_kernel.initialise_from_data(A.reshape(-1, A.shape[-1]), 1.0)
        if rescale:
            with torch.no_grad():
                unit = float(self.K_diag(sample[:100]).mean() / self.base_kernel.value("variance"))
            self.base_kernel._assign("variance", signal_variance / max(unit, 1e-300))

    # -- structure for save/load ----------------------------------------------------------
    def config(self) -> dict[str, Any]:
        return {"type": type(self).__name__, "base": self.base_kernel.config(),
                "args": {"image_shape": list(self.image_shape), "patch_shape": list(self.patch_shape),
                         "weighted": self.weighted, "channels": self.channels,
                         "multichannel": self.multichannel}}

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> Convolutional:
        return cls(kernel_from_config(cfg["base"]), **cfg["args"])

    def __repr__(self) -> str:
        (H, W), (h, w) = self.image_shape, self.patch_shape
        kind = "weighted" if self.weighted else "invariant"
        kind += ", multi-channel" if self.multichannel else ""
        return (f"Convolutional({self.base_kernel!r}, image {H}×{W}×{self.channels}, "
                f"patch {h}×{w}, {kind})")


def weighted_sum(K: Tensor, w: Tensor | None, dim: int) -> Tensor:
    """Σ_s w_gs K[..., g, ..., s, ...] over dimension `dim` (of size S), where dimension 1
    of K holds the group g, for weights w [G, S] (None: all 1). Shapes: K [n, G, ...]."""
    if w is None:
        return K.sum(dim)
    w = w.to(K.dtype)
    if dim == K.dim() - 2 and K.dim() >= 4:  # [n, G, …, S, L]: one batched product
        shape = [1, w.shape[0], *[1] * (K.dim() - 4), 1, w.shape[1]]
        return (w.reshape(shape) @ K).squeeze(-2)
    shape = [1] * K.dim()
    shape[1], shape[dim] = w.shape
    return (K * w.reshape(shape)).sum(dim)


def _se_diagonal(kernel: Convolutional, Xb: Tensor, ell: Tensor, var: Tensor,
                 w: Tensor | None) -> Tensor:
    """diag K_ff of a block of images [n] for a squared-exponential base kernel, from the
    tensors given (differentiable in them)."""
    A = kernel.grouped_patches(Xb)  # [n, G, S, d]
    n, G, S, d = A.shape
    K = squared_exponential_exp(A.reshape(-1, S, d), A.reshape(-1, S, d), ell, var)
    return weighted_sum(weighted_sum(K.reshape(n, G, S, S), w, 2), w, 2).sum(1)


class _DiagonalContext(Context, Protocol):
    kernel: Convolutional
    rows: int


class _SquaredExponentialDiagonal(torch.autograd.Function):
    """diag K_ff of a convolutional kernel with a squared-exponential base, in blocks of
    images, with the gradient by hand: per block the patch Gram K [n, G, S, S] is recomputed
    once; with H = ∂d_n w wᵀ ∘ K (symmetric), r its row sums and x̃ = (a − c)/ℓ the scaled
    patches (c each image's centre), ∂w_gs = 2 Σ_n ∂d_n (K w)_gs, ∂σ² = Σ H/σ² and
    ∂ℓ_d = 2 Σ_s (r_s x̃²_sd − x̃_sd (H x̃)_sd)/ℓ_d — one batched product H x̃ instead of an
    autograd pass over the Q² values per image. Used when the images need no gradient.
    Under `create_graph` (a second derivative to follow, `torch.func.grad`) each block's
    gradient is taken by autograd instead, with a graph."""

    @staticmethod
    def forward(kernel: Convolutional, X: Tensor, rows: int, ell: Tensor, var: Tensor,
                w: Tensor | None) -> Tensor:
        return torch.cat([_se_diagonal(kernel, X[i:i + rows], ell, var, w)
                          for i in range(0, X.shape[0], rows)])

    @staticmethod
    def setup_context(ctx: _DiagonalContext, inputs: tuple[Any, ...], output: Tensor) -> None:
        kernel, X, rows, ell, var, w = inputs
        ctx.kernel, ctx.rows = kernel, rows
        ctx.save_for_backward(X, ell, var, *(() if w is None else (w,)))

    @staticmethod
    def backward(ctx: _DiagonalContext, grad: Tensor) -> tuple[Tensor | None, ...]:
        X, ell, var, *rest = ctx.saved_tensors
        w = rest[0] if rest else None
        kernel = ctx.kernel
        if torch.is_grad_enabled():  # a graph of the gradient is wanted: autograd
            gs = blockwise_gradients(
                lambda i, ell, var, w: _se_diagonal(kernel, X[i:i + ctx.rows], ell, var, w),
                lambda i: grad[i:i + ctx.rows], range(0, X.shape[0], ctx.rows),
                (ell, var, w), ctx.needs_input_grad[3:6])
            return (None, None, None, *gs)
        d = kernel.patch_dim
        ells = ell.expand(d)
        g_ell, g_var = ells.new_zeros(d), var.new_zeros(())
        gw = None if w is None else torch.zeros_like(w)
        for i in range(0, X.shape[0], ctx.rows):
            A = kernel.grouped_patches(X[i:i + ctx.rows])  # [n, G, S, d]
            n, G, S, _ = A.shape
            A = A.reshape(n * G, S, d)
            K = squared_exponential_exp(A, A, ell, var).view(n, G, S, S)
            g = grad[i:i + ctx.rows].to(K.dtype)[:, None, None, None]
            if w is None or gw is None:  # (gw is None exactly when w is)
                H = K.mul_(g)  # K is scratch from here on
            else:
                Kw = K @ w.to(K.dtype)[None, :, :, None]  # [n, G, S, 1]
                gw += 2.0 * (g[..., 0] * Kw[..., 0]).sum(0)
                H = K.mul_(g * w[None, :, :, None] * w[None, :, None, :])
            H = H.view(n * G, S, S)
            Xs = (A - A.mean(-2, keepdim=True)) / ells  # squared_exponential_exp's centring
            g_ell += 2.0 * half_distance_sums(H, Xs, Xs)
            g_var += H.sum()
        g_ell = g_ell / ells
        return (None, None, None, g_ell.sum() if ell.dim() == 0 else g_ell, g_var / var, gw)


def _budget_elements(A: Tensor) -> int:
    """Elements of the largest temporary a block may hold (a quarter of the chunk budget,
    the base kernel's own temporaries taking the rest)."""
    return max(1, CHUNK_MEMORY_BYTES // (4 * A.element_size() * 4))
