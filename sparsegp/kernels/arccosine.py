"""The arc-cosine kernel of an infinitely wide one-layer network (Cho & Saul 2009)."""

from __future__ import annotations

import math
import numbers
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor

from ..autograd import Context
from ..parameters import UserValue
from ..runtime.config import POSITIVE_FLOOR
from ..validation import ArrayLike
from .base import Kernel, as_inputs, check_input_pair

#: J_n(0)/π: K_diag = σ² ‖x‖^{2n} J_n(0)/π (order 0: 1, order 1: 1, order 2: 3).
DIAGONAL = {0: 1.0, 1: 1.0, 2: 3.0}

#: Order 0 takes cosines within this many rounding units of 1 as exactly 1 (the same direction).
SNAP = 16.0


class _AngularContext(Context, Protocol):
    order: int


class _AngularFunction(torch.autograd.Function):
    """J_n(c) of the cosine c = cos θ ∈ [−1, 1]:

    J_0 = π − θ,  J_1 = sin θ + (π − θ) c,  J_2 = 3 sin θ c + (π − θ)(1 + 2c²),

    with the derivatives dJ_0/dc = 1/sin θ, dJ_1/dc = J_0, dJ_2/dc = 4 J_1 written out: for
    orders 1 and 2 they are finite at c = ±1, where the chain rule through arccos would give
    0·∞. Order 0 has an infinite slope there; its backward gives 0 at |c| = 1. The backward
    is written in differentiable operations: its own derivative (a second derivative of K)
    is the true one inside (−1, 1)."""

    @staticmethod
    def forward(c: Tensor, order: int) -> Tensor:
        return _angular(c, order)

    @staticmethod
    def setup_context(ctx: _AngularContext, inputs: tuple[Tensor, int], output: Tensor) -> None:
        c, order = inputs
        ctx.save_for_backward(c)
        ctx.order = order

    @staticmethod
    def backward(ctx: _AngularContext, grad: Tensor) -> tuple[Tensor | None, None]:
        (c,) = ctx.saved_tensors
        if ctx.order == 0:
            s = torch.sqrt((1.0 - c * c).clamp_min(0.0))
            slope = torch.where(s > 0, 1.0 / torch.where(s > 0, s, 1.0), 0.0)
        elif ctx.order == 1:
            slope = _angular(c, 0)
        else:
            slope = 4.0 * _angular(c, 1)
        return grad * slope, None


def _angular(c: Tensor, order: int) -> Tensor:
    rest = math.pi - torch.acos(c)  # π − θ
    if order == 0:
        return rest
    s = torch.sqrt((1.0 - c * c).clamp_min(0.0))  # sin θ
    if order == 1:
        return s + rest * c
    return 3.0 * s * c + rest * (1.0 + 2.0 * c * c)


class ArcCosine(Kernel):
    """k(x, x') = (σ²/π) J_n(θ) (‖x‖ ‖x'‖)^n, the covariance of an infinitely wide layer of
    step (n = 0), ramp / ReLU (n = 1) or squared-ramp (n = 2) units (Cho & Saul 2009), with
    weighted norms ‖x‖² = Σ_d w_d x_d² + b and the angle cos θ = (Σ_d w_d x_d x'_d + b)/(‖x‖ ‖x'‖):

        J_0 = π − θ,  J_1 = sin θ + (π − θ) cos θ,  J_2 = 3 sin θ cos θ + (π − θ)(1 + 2 cos² θ).

    It is 2σ² E_w[Θ(wᵀx̃) Θ(wᵀx̃') (wᵀx̃)^n (wᵀx̃')^n] for w ~ N(0, I) and x̃ = [√w_d x_d, √b]:
    not stationary, it grows as ‖x‖^{2n} (order 0 does not: k(x, x) = σ²). As in GPflow:
    `order` (0, 1 or 2) is fixed; the variance σ² (scalar), the weight variances w (scalar or
    one per input column, ARD) and the bias variance b (scalar) are learned, each positive.
    Shapes: weight_variances [] or [D]; X [N, D], X2 [N2, D] -> K [N, N2], K_diag [N]. Unset
    values start from the data: w_d = 1/(D · mean x_d²) (per column with `ard=True`, else
    their mean), so that Σ_d w_d x_d² is about 1; σ² the signal variance over the mean of
    J_n(0)/π ‖x‖^{2n}; an unset bias variance stays 1.

    Example:

        >>> import torch, sparsegp as sg
        >>> k = sg.kernels.ArcCosine(order=0, variance=2.0, weight_variances=1.0,
        ...                          bias_variance=1e-5)
        >>> X = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
        >>> round(k.K(X)[0, 1].item(), 3)  # orthogonal inputs: σ² (1 − θ/π), θ ≈ π/2
        1.0
        >>> k.config()["args"]["order"], [round(v, 6) for v in k.K_diag(X).tolist()]
        (0, [2.0, 2.0])
    """

    per_input = ("weight_variances",)

    def __init__(self, order: int = 1, variance: ArrayLike | None = None,
                 weight_variances: ArrayLike | None = None,
                 bias_variance: ArrayLike | None = None, *, ard: bool = False) -> None:
        if (isinstance(order, bool) or not isinstance(order, numbers.Integral)
                or int(order) not in DIAGONAL):
            raise ValueError(f"order must be 0, 1 or 2; got {order!r}")
        super().__init__()
        self.order: int = int(order)
        self.ard: bool = bool(ard) or (weight_variances is not None and np.ndim(weight_variances) == 1)
        self._declare("variance", variance, 1.0, POSITIVE_FLOOR, max_dim=0)
        self._declare("weight_variances", weight_variances, 1.0, POSITIVE_FLOOR)
        self._declare("bias_variance", bias_variance, 1.0, POSITIVE_FLOOR, max_dim=0)

    variance = UserValue()

    weight_variances = UserValue()

    bias_variance = UserValue()

    def _weights(self, X: Tensor) -> Tensor:
        w = self.value("weight_variances")
        if w.dim() == 1 and w.shape[0] != X.shape[1]:
            raise ValueError(f"X has {X.shape[1]} columns but the weight variances have shape "
                             f"{tuple(w.shape)}")
        return w

    def _squared_norms(self, X: Tensor, w: Tensor) -> Tensor:
        return (X * X * w).sum(-1) + self.value("bias_variance")

    def K(self, X: Tensor, X2: Tensor | None = None) -> Tensor:
        check_input_pair(X, X2)
        w = self._weights(X)
        b = self.value("bias_variance")
        sq = self._squared_norms(X, w)
        norm = torch.sqrt(sq)
        Xw = X * w
        if X2 is None:
            dot = Xw @ X.to(Xw.dtype).mT + b
            norm2 = norm
        else:
            dot = Xw @ X2.to(Xw.dtype).mT + b
            norm2 = torch.sqrt(self._squared_norms(X2, w))
        outer = norm[:, None] * norm2[None, :]
        c = (dot / outer).clamp(-1.0, 1.0)
        if self.order == 0:
            # J_0 = π − arccos c has an infinite slope at c = 1: a rounding error ε in c
            # would move k by √(2ε)/π; cosines within rounding of 1 are identical directions
            near = 1.0 - SNAP * torch.finfo(c.dtype).eps
            c = torch.where(c >= near, torch.ones_like(c), c)
        if X2 is None:  # exactly 1 on the diagonal: θ = 0, and no slope of an exact identity
            eye = torch.eye(X.shape[0], dtype=torch.bool, device=X.device)
            c = torch.where(eye, torch.ones_like(c), c)
        J = _AngularFunction.apply(c, self.order)
        scale = self.value("variance") / math.pi
        return scale * J if self.order == 0 else scale * J * outer ** self.order

    def K_diag(self, X: Tensor) -> Tensor:
        X = as_inputs(X)
        sq = self._squared_norms(X, self._weights(X))
        return (self.value("variance") * DIAGONAL[self.order]) * sq ** self.order

    def initialise_from_data(self, X: Tensor, signal_variance: float) -> None:
        if "weight_variances" in self._unset:
            mean_sq = (X * X).mean(0) if X.shape[0] > 0 else torch.ones(X.shape[1], dtype=X.dtype)
            mean_sq = torch.where(mean_sq > 0, mean_sq, torch.ones_like(mean_sq))
            w = 1.0 / (X.shape[1] * mean_sq)
            self._assign("weight_variances", w if self.ard else w.mean(), reshape=self.ard)
        if "variance" in self._unset:
            with torch.no_grad():
                sq = self._squared_norms(X, self.value("weight_variances").to(X.dtype))
                scale = float((DIAGONAL[self.order] * sq ** self.order).mean())
            ok = math.isfinite(scale) and scale > 0
            self._assign("variance", signal_variance / scale if ok else signal_variance)

    def config(self) -> dict[str, Any]:
        cfg = super().config()
        cfg["args"]["order"] = self.order
        cfg["args"]["ard"] = self.ard
        return cfg

    def __repr__(self) -> str:
        return f"{type(self).__name__}(order={self.order}, " + super().__repr__().split("(", 1)[1]
