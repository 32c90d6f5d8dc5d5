"""Stationary kernels of the scaled distance r = ‖(x − x')/ℓ‖: squared exponential, Matérn.

All of them evaluate K(X, X2) through one matrix product plus elementwise passes:
r² = ‖x̃‖² + ‖x̃'‖² − 2 x̃ᵀx̃' on inputs scaled by 1/ℓ and shifted by a common centre
(distances are translation invariant; the shift limits cancellation).
"""

from __future__ import annotations

import math
from abc import abstractmethod
from typing import Any, cast

import numpy as np
import torch
from torch import Tensor

from ..parameters import UserValue
from ..runtime.config import POSITIVE_FLOOR
from ..validation import ArrayLike
from . import profiles
from .base import Kernel, check_input_pair


def scaled_squared_distance(X: Tensor, X2: Tensor | None, lengthscale: Tensor) -> Tensor:
    """‖(x − x')/ℓ‖² for every pair. Shapes: X [N, D], X2 [N2, D], ℓ [] or [D] -> [N, N2];
    also batched: X [B, N, D], X2 [B, N2, D] -> [B, N, N2]."""
    Xs = X / lengthscale
    X2s = Xs if X2 is None else X2 / lengthscale
    centre = X2s.detach().mean(-2, keepdim=True)
    Xs = Xs - centre
    X2s = Xs if X2 is None else X2s - centre
    sq = (Xs * Xs).sum(-1)
    sq2 = sq if X2 is None else (X2s * X2s).sum(-1)
    product = torch.addmm if Xs.dim() == 2 else torch.baddbmm
    r2 = product(sq[..., :, None] + sq2[..., None, :], Xs, X2s.mT, alpha=-2.0)
    # Rounding can leave a coincident pair's r² slightly below zero: clamp the value, but not
    # the derivatives — they stay those of the polynomial above (2(x − x')/ℓ², 2/ℓ², ...),
    # where an autograd clamp would pass none below zero and make the second derivative in
    # an inducing input on top of a data input zero instead of 2/ℓ².
    with torch.no_grad():
        r2.clamp_min_(0.0)
    if X2 is None:
        r2.diagonal(dim1=-2, dim2=-1).zero_()
    return r2


def radial_gram_gradients(kernel: RadialKernel, r2: Tensor, G: Tensor, X_rows: Tensor,
                          X_all: Tensor, ell: Tensor, variance: Tensor) -> tuple[Tensor, Tensor]:
    """(∂ℓ [D], ∂σ²) of ⟨G, K⟩ for rows of a symmetric Gram matrix K = σ² ρ(r²) of a radial
    kernel with a symmetric G, given those rows' r² and G [..., R, N] (R of the N rows,
    X_rows [..., R, D], all the rows X_all [..., N, D], any common centring; ℓ expanded to
    [D]): ∂σ² = ⟨G, ρ⟩ and, with H = σ² G ⊙ ρ'(r²), ∂ℓ_d = −(2/ℓ_d³) Σ_ij H_ij (x_id −
    x_jd)², i.e. −(4/ℓ_d³) Σ_i (x_id² (H1)_i − x_id (H x_d)_i) — additive over blocks of rows,
    and no per-dimension R×N matrix. Needs the kernel's `profile_derivative`."""
    gvariance = (G * kernel.profile(r2)).sum()
    H = cast(Tensor, kernel.profile_derivative(r2)).mul_(G).mul_(variance)
    return -4.0 * half_distance_sums(H, X_rows, X_all) / ell**3, gvariance


def half_distance_sums(H: Tensor, X_rows: Tensor, X_all: Tensor) -> Tensor:
    """Σ_i (x_id² (H1)_i − x_id (H x_d)_i) per dimension d [D], summed over any batch: for a
    symmetric H split into blocks of rows, ½ Σ_ij H_ij (x_id − x_jd)² (H [..., R, N], X_rows
    [..., R, D] those rows, X_all [..., N, D])."""
    per_dim = X_rows * X_rows * H.sum(-1, keepdim=True) - X_rows * (H @ X_all)
    return per_dim.reshape(-1, X_rows.shape[-1]).sum(0)


def se_augmented(Xs: Tensor, log_variance: Tensor | None = None) -> Tensor:
    """Rows of the squared exponential's augmented product on scaled, centred inputs x̃:
    [x̃, 1, −½‖x̃‖²] (left) or, given log σ², [x̃, log σ² − ½‖x̃‖², 1] (right), so that
    left · rightᵀ = log σ² − ½‖x̃ − x̃'‖². Shapes: Xs [..., N, D] -> [..., N, D + 2]."""
    half = -0.5 * (Xs * Xs).sum(-1, keepdim=True)
    ones = torch.ones_like(half)
    if log_variance is None:
        return torch.cat([Xs, ones, half], -1)
    return torch.cat([Xs, log_variance + half, ones], -1)


def squared_exponential_exp(X: Tensor, X2: Tensor, lengthscale: Tensor, variance: Tensor) -> Tensor:
    """σ² exp(−½‖(x − x')/ℓ‖²) by one augmented product (`se_augmented`) and one exp pass (no
    clamp, no distance temporaries), x̃ = (x − c)/ℓ for a common centre c. Shapes:
    X [..., N, D], X2 [..., N2, D] -> [..., N, N2]. Values at r = 0 carry rounding of order
    ε‖x̃‖² (not exactly σ²): for cross-covariances, not for matrices that are factorised."""
    centre = X2.detach().mean(-2, keepdim=True)
    Xs, X2s = (X - centre) / lengthscale, (X2 - centre) / lengthscale
    E = se_augmented(Xs) @ se_augmented(X2s, torch.log(variance)).mT
    return torch.exp(E) if torch.is_grad_enabled() else E.exp_()


class Stationary(Kernel):
    """A stationary kernel with lengthscale ℓ and signal variance σ² = k(x, x); ARD when the
    lengthscale has shape (D,). See `RadialKernel` and `Periodic`.

    Shapes: lengthscale [] or [D] (ARD), variance []; X [N, D], X2 [N2, D] -> K [N, N2],
    K_diag [N]. `lengthscale=None` / `variance=None` leave them unset: a model starts them
    from its data (`ard=True` then gives one lengthscale per input column).

    Example:

        >>> import torch, sparsegp as sg
        >>> k = sg.kernels.Matern52(lengthscale=[1.0, 2.0], variance=0.5)
        >>> isinstance(k, sg.kernels.Stationary), k.ard, k.lengthscale.round(6).tolist()
        (True, True, [1.0, 2.0])
        >>> k.lengthscale = [3.0, 4.0]; k.variance = 2.0
        >>> k.lengthscale.round(6).tolist(), round(k.variance, 6)
        ([3.0, 4.0], 2.0)
        >>> X = torch.ones(3, 2, dtype=torch.float64)
        >>> [round(v, 6) for v in k.K_diag(X).tolist()]
        [2.0, 2.0, 2.0]
    """

    per_input: tuple[str, ...] = ("lengthscale",)

    def __init__(self, lengthscale: ArrayLike | None = None, variance: ArrayLike | None = None, *,
                 ard: bool = False) -> None:
        super().__init__()
        self.ard = bool(ard) or (lengthscale is not None and np.ndim(lengthscale) == 1)
        self._declare("lengthscale", lengthscale, 1.0, POSITIVE_FLOOR)
        self._declare("variance", variance, 1.0, POSITIVE_FLOOR, max_dim=0)

    lengthscale = UserValue("ℓ: a number, or one per input column (ARD).")

    variance = UserValue("σ², the signal variance.")

    def K_diag(self, X: Tensor) -> Tensor:
        self._checked_lengthscale(X, None)
        return self.value("variance").expand(X.shape[0])

    def _checked_lengthscale(self, X: Tensor, X2: Tensor | None) -> Tensor:
        check_input_pair(X, X2)
        ell = self.value("lengthscale")
        if ell.dim() == 1 and ell.shape[0] != X.shape[1]:
            raise ValueError(
                f"X has {X.shape[1]} columns but the lengthscale has shape {tuple(ell.shape)}"
            )
        return ell

    def initialise_from_data(self, X: Tensor, signal_variance: float) -> None:
        super().initialise_from_data(X, signal_variance)
        if "lengthscale" in self._unset:
            # The spread of each input dimension, scaled so that the typical distance
            # between two points in D dimensions is a few lengthscales.
            std = X.std(0) if X.shape[0] > 1 else torch.ones(X.shape[1], dtype=X.dtype)
            std = torch.where(std > 0, std, torch.ones_like(std)) * math.sqrt(X.shape[1])
            # ARD: the scalar default becomes one lengthscale per input column
            self._assign("lengthscale", std if self.ard else std.mean(), reshape=self.ard)

    def config(self) -> dict[str, Any]:
        cfg = super().config()
        cfg["args"]["ard"] = self.ard
        return cfg


class RadialKernel(Stationary):
    """k(x, x') = σ² ρ(r²) of the scaled distance r² = ‖(x − x')/ℓ‖².

    Shapes: X [N, D], X2 [N2, D] -> K [N, N2]; `profile(r2)` maps r² [...] to ρ [...] with
    ρ(0) = 1. A subclass implements `profile` only (the squared exponential and the Matérn
    kernels are radial kernels; `KISSGP` requires one).

    Example:

        >>> import torch, sparsegp as sg
        >>> class Cauchy(sg.kernels.RadialKernel):
        ...     def profile(self, r2):
        ...         return 1.0 / (1.0 + r2)
        >>> k = Cauchy(lengthscale=1.0, variance=1.0)
        >>> X = torch.tensor([[0.0], [1.0]], dtype=torch.float64)
        >>> isinstance(k, sg.kernels.RadialKernel), round(k.K(X)[0, 1].item(), 6)
        (True, 0.5)
    """

    @abstractmethod
    def profile(self, r2: Tensor) -> Tensor:
        """ρ(r²) with ρ(0) = 1."""

    def profile_derivative(self, r2: Tensor) -> Tensor | None:
        """dρ/d(r²) elementwise (0 where r² = 0: it only ever multiplies a zero distance), or
        None when a subclass does not give it (the exact GP then differentiates K by
        autograd: `objectives/exact.py`)."""
        return None

    def K(self, X: Tensor, X2: Tensor | None = None) -> Tensor:
        ell = self._checked_lengthscale(X, X2)
        return self.value("variance") * self.profile(scaled_squared_distance(X, X2, ell))

    def K_blocks(self, X: Tensor) -> Tensor:
        # the batched distances: B·S² kernel values, not (B·S)²
        ell = self._checked_lengthscale(X[0], None)
        return self.value("variance") * self.profile(scaled_squared_distance(X, None, ell))


class SquaredExponential(RadialKernel):
    """σ² exp(−r²/2) (RBF).

    Shapes: lengthscale [] or [D] (ARD), variance []; X [N, D], X2 [N2, D] -> K [N, N2],
    K_diag [N]. `sparsegp.kernels.RBF` is another name for this class.

    Example:

        >>> import torch, sparsegp as sg
        >>> k = sg.kernels.SquaredExponential(lengthscale=0.5, variance=2.0)
        >>> X = torch.tensor([[0.0], [0.5]], dtype=torch.float64)
        >>> K = k.K(X)  # 2 exp(−½) off the diagonal
        >>> tuple(K.shape), round(K[0, 1].item(), 4)
        ((2, 2), 1.2131)
        >>> sg.kernels.RBF is sg.kernels.SquaredExponential
        True
    """

    def profile(self, r2: Tensor) -> Tensor:
        return torch.exp(-0.5 * r2)

    def profile_derivative(self, r2: Tensor) -> Tensor:
        """−½ exp(−r²/2)."""
        return torch.exp(-0.5 * r2).mul_(-0.5)


def _distance(r2: Tensor) -> Tensor:
    # sqrt with a finite gradient at r = 0 (the clamp passes no gradient below the floor).
    return torch.sqrt(r2.clamp_min(1e-36))


class Matern12(RadialKernel):
    """σ² exp(−r) (Ornstein–Uhlenbeck).

    Shapes: lengthscale [] or [D] (ARD), variance []; X [N, D], X2 [N2, D] -> K [N, N2].
    Its sample paths are continuous but nowhere differentiable.

    Example:

        >>> import torch, sparsegp as sg
        >>> k = sg.kernels.Matern12(lengthscale=1.0, variance=1.0)
        >>> X = torch.tensor([[0.0], [1.0]], dtype=torch.float64)
        >>> round(k.K(X)[0, 1].item(), 4)  # exp(−1)
        0.3679
    """

    def profile(self, r2: Tensor) -> Tensor:
        return torch.exp(-_distance(r2))

    def profile_derivative(self, r2: Tensor) -> Tensor:
        """−exp(−r)/(2r) (0 at r = 0)."""
        r = _distance(r2)
        return torch.where(r2 > 0, torch.exp(-r).div_(r).mul_(-0.5), 0.0)


class Matern32(RadialKernel):
    """σ² (1 + √3 r) exp(−√3 r).

    Shapes: lengthscale [] or [D] (ARD), variance []; X [N, D], X2 [N2, D] -> K [N, N2].
    Once-differentiable sample paths.

    Example:

        >>> import torch, sparsegp as sg
        >>> k = sg.kernels.Matern32(lengthscale=1.0, variance=1.0)
        >>> X = torch.tensor([[0.0], [1.0]], dtype=torch.float64)
        >>> round(k.K(X)[0, 1].item(), 4)  # (1 + √3) exp(−√3)
        0.4834
    """

    def profile(self, r2: Tensor) -> Tensor:
        return profiles.profile(self, r2)

    def profile_formula(self, r2: Tensor) -> Tensor:
        """(1 + √3 r) exp(−√3 r), differentiated by `profile_derivative` (`profiles`)."""
        s = math.sqrt(3.0) * _distance(r2)
        return (1.0 + s) * torch.exp(-s)

    def profile_derivative(self, r2: Tensor) -> Tensor:
        """−(3/2) exp(−√3 r)."""
        return torch.exp(_distance(r2).mul_(-math.sqrt(3.0))).mul_(-1.5)

    def profile_second_derivative(self, r2: Tensor) -> Tensor:
        """(3√3/4) exp(−√3 r)/r (0 at r = 0: it multiplies a zero distance's derivative)."""
        r = _distance(r2)
        return torch.where(r2 > 0, torch.exp(-math.sqrt(3.0) * r) / r, 0.0).mul_(
            0.75 * math.sqrt(3.0))


class Matern52(RadialKernel):
    """σ² (1 + √5 r + 5r²/3) exp(−√5 r).

    Shapes: lengthscale [] or [D] (ARD), variance []; X [N, D], X2 [N2, D] -> K [N, N2].
    Twice-differentiable sample paths.

    Example:

        >>> import torch, sparsegp as sg
        >>> k = sg.kernels.Matern52(lengthscale=2.0, variance=1.0)
        >>> X = torch.tensor([[0.0], [2.0]], dtype=torch.float64)
        >>> round(k.K(X)[0, 1].item(), 4)  # r = 1: (1 + √5 + 5/3) exp(−√5)
        0.524
    """

    def profile(self, r2: Tensor) -> Tensor:
        return profiles.profile(self, r2)

    def profile_formula(self, r2: Tensor) -> Tensor:
        """(1 + √5 r + 5r²/3) exp(−√5 r), differentiated by `profile_derivative`."""
        s = math.sqrt(5.0) * _distance(r2)
        return (1.0 + s + (5.0 / 3.0) * r2) * torch.exp(-s)

    def profile_second_derivative(self, r2: Tensor) -> Tensor:
        """(25/12) exp(−√5 r)."""
        return torch.exp(_distance(r2).mul_(-math.sqrt(5.0))).mul_(25.0 / 12.0)

    def profile_derivative(self, r2: Tensor) -> Tensor:
        """−(5/6)(1 + √5 r) exp(−√5 r)."""
        s = _distance(r2).mul_(math.sqrt(5.0))
        return torch.exp(-s).mul_(s.add_(1.0)).mul_(-5.0 / 6.0)
