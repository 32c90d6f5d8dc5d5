"""The periodic kernel (MacKay 1998)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..parameters import UserValue
from ..runtime.config import POSITIVE_FLOOR
from ..validation import ArrayLike
from .base import Kernel
from .stationary import Stationary


class Periodic(Stationary):
    """σ² exp(−2 Σ_d sin²(π (x_d − x'_d)/p_d) / ℓ_d²).

    Lengthscale and period are scalars or shape (D,). Evaluated by one matrix product:
    sin²(a − b) = (1 − cos 2a cos 2b − sin 2a sin 2b)/2.
    Shapes: lengthscale, period [] or [D], variance []; X [N, D], X2 [N2, D] -> K [N, N2].
    A model starts only an unset variance from the data; an unset lengthscale and period stay 1
    (with `ard=True`, an unset lengthscale is one 1 per input column).

    Example:

        >>> import torch, sparsegp as sg
        >>> k = sg.kernels.Periodic(lengthscale=1.0, variance=1.0, period=0.5)
        >>> X = torch.tensor([[0.0], [0.5], [0.25]], dtype=torch.float64)
        >>> K = k.K(X)
        >>> round(K[0, 1].item(), 6), K[0, 2].item() < 1.0, round(k.period, 6)  # one period apart
        (1.0, True, 0.5)
    """

    per_input = ("lengthscale", "period")

    def __init__(
        self, lengthscale: ArrayLike | None = None, variance: ArrayLike | None = None,
        period: ArrayLike | None = None, *, ard: bool = False
    ) -> None:
        super().__init__(lengthscale, variance, ard=ard)
        self._declare("period", period, 1.0, POSITIVE_FLOOR)

    period = UserValue("p: a number, or one per input column.")

    def initialise_from_data(self, X: Tensor, signal_variance: float) -> None:
        # Lengthscale and period are relative to the period, not the input spread: only
        # the variance has a data-based start; unset ones stay at 1 (one per input with ARD).
        Kernel.initialise_from_data(self, X, signal_variance)
        if "lengthscale" in self._unset and self.ard:
            self._assign("lengthscale", torch.ones(X.shape[1], dtype=X.dtype), reshape=True)

    def _features(self, X: Tensor, ell: Tensor) -> Tensor:
        angle = (2.0 * math.pi) * X / self.value("period")
        return torch.cat([torch.cos(angle) / ell, torch.sin(angle) / ell], dim=-1)

    def K(self, X: Tensor, X2: Tensor | None = None) -> Tensor:
        ell = self._checked_lengthscale(X, X2)
        p = self.value("period")
        if p.dim() == 1 and p.shape[0] != X.shape[1]:
            raise ValueError(f"X has {X.shape[1]} columns but the period has shape {tuple(p.shape)}")
        F = self._features(X, ell)
        F2 = F if X2 is None else self._features(X2, ell)
        inv_l2 = (1.0 / ell**2).expand(X.shape[1]).sum()
        # 2 Σ_d sin²(θ_d)/ℓ_d² = Σ_d (1 − cos 2θ_d)/ℓ_d²
        s = inv_l2 - F @ F2.mT
        with torch.no_grad():  # the value clamped, the derivatives those of the expression
            s.clamp_min_(0.0)  # (`scaled_squared_distance` says why)
        if X2 is None:
            s.fill_diagonal_(0.0)
        return self.value("variance") * torch.exp(-s)
